"""``GET /console/api/tables/{tenant}/{namespace}/{topic}``: a topic's built-in (SBT) Iceberg table.

Two sources. The metadata plane always answers which compacted objects the topic's
offset index refers to and the offsets they cover: those objects are the table's data
files once the compaction worker has synced it. The catalog (read with pyiceberg, from
the lakehouse extra, only when it is installed; the broker never needs Spark for this)
gives the table itself: its snapshots with the offsets each one covers, and the data
files of the current one. The catalog is the one the compaction worker commits to
(``iceberg_rest.sbt_catalog``: ``--sbt-catalog``, by default ``iceberg/catalog.db``
beside a ``file://`` object store).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json

from aiohttp import web

from ...lakehouse import sbt
from ..admin.common import AdminError, context, partitions, stream_exists, topic_name
from ..iceberg_rest.sbt_catalog import CatalogLocation

#: At most this many data files and compacted objects are listed (the totals are always given).
MAX_LISTED = 500
NO_EXTRA = ("the lakehouse extra is not installed (pip install 'nereus[lakehouse]'): "
            "the table's snapshots and data files cannot be read")


def _offsets(summary: dict) -> dict:
    try:
        return json.loads(summary.get(sbt.OFFSETS_PROPERTY) or "{}")
    except ValueError:
        return {}


def _read_table(where: CatalogLocation, ident: tuple[str, str, str]) -> dict:
    """The table's snapshots and current data files as the catalog has them (blocking: run in a thread)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        table = where.open().load_table(ident)
    except (NoSuchTableError, NoSuchNamespaceError):
        return {"exists": False, "note": "no table yet: the compaction worker creates it on its first run"}
    snapshots = []  # ids as strings: 64-bit, beyond what a JavaScript number holds exactly
    for snap in table.metadata.snapshots:
        props = snap.summary.additional_properties if snap.summary is not None else {}
        snapshots.append({
            "snapshotId": str(snap.snapshot_id),
            "parentId": None if snap.parent_snapshot_id is None else str(snap.parent_snapshot_id), "timestampMs": snap.timestamp_ms,
            "operation": snap.summary.operation.value if snap.summary is not None else None,
            "addedDataFiles": int(props.get("added-data-files", 0)),
            "deletedDataFiles": int(props.get("deleted-data-files", 0)),
            "totalDataFiles": int(props.get("total-data-files", 0)),
            "totalRecords": int(props.get("total-records", 0)),
            "offsets": _offsets(props)})
    current = table.current_snapshot()
    files = []
    if current is not None:
        for task in table.scan().plan_files():
            data = task.file
            files.append({"path": data.file_path, "partition": data.partition[0] if len(data.partition) else None,
                          "records": data.record_count, "bytes": data.file_size_in_bytes})
    files.sort(key=lambda f: (f["partition"] if f["partition"] is not None else -1, f["path"]))
    return {"exists": True, "location": table.metadata.location,
            "currentSnapshotId": str(current.snapshot_id) if current is not None else None,
            "snapshots": snapshots, "dataFileCount": len(files), "dataFiles": files[:MAX_LISTED],
            "offsets": sbt.read_offsets(table)}


NO_CATALOG = "no catalog of built-in tables: the object store is not file:// and the broker has no --sbt-catalog"


async def _catalog_view(where: CatalogLocation | None, ident: tuple[str, str, str]) -> dict:
    if importlib.util.find_spec("pyiceberg") is None:
        return {"available": False, "note": NO_EXTRA}
    if where is None:
        return {"available": False, "note": NO_CATALOG}
    if not where.exists:
        return {"available": True, "catalog": str(where), "exists": False,
                "note": "no catalog yet: the compaction worker creates it on its first run"}
    view = await asyncio.to_thread(_read_table, where, ident)
    return {"available": True, "catalog": str(where), **view}


async def get_table(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request).base
    streams = await partitions(ctx, name)
    if not any([await stream_exists(ctx.storage, s) for s in streams]):
        raise AdminError(404, "Topic not found")
    objects = await sbt.compacted_objects(ctx.meta, str(name))
    ident = sbt.identifier(str(name))
    listed = [{"key": o.key, "partition": o.partition, "firstOffset": o.first, "lastOffset": o.last}
              for o in sorted(objects, key=lambda o: (o.partition, o.first))]
    return web.json_response({
        "topic": str(name), "table": ".".join(ident), "partitioned": streams != [name],
        "compactedObjectCount": len(listed), "compactedObjects": listed[:MAX_LISTED],
        "coveredOffsets": sbt.coverage(objects),
        "catalog": await _catalog_view(ctx.sbt_catalog, ident),
    })


__all__ = ["NO_CATALOG", "NO_EXTRA", "get_table"]
