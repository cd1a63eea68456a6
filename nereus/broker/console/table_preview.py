"""``GET /console/api/tables/{tenant}/{namespace}/{topic}/rows``: the first rows of a topic's built-in table.

Read with pyiceberg from the table's current snapshot (the catalog ``tables.py``
finds), in a worker thread: planning and reading Parquet never run on the event
loop. Only the record columns are read, at most ``MAX_ROWS`` rows (``?limit=``), each
key and value shown as text when it is UTF-8, else as hex, cut at ``MAX_CELL_BYTES``.
A topic without a table yet answers ``exists: false`` and why.
"""

from __future__ import annotations

import asyncio
import importlib.util

from aiohttp import web

from ...lakehouse import sbt
from ..admin.common import AdminError, context, topic_name
from . import tables

DEFAULT_ROWS = 20
MAX_ROWS = 200
MAX_CELL_BYTES = 1024
#: The table's record columns (``lakehouse.table_format.RECORD_SCHEMA``; that module needs pyarrow at import).
COLUMNS = ("partition", "offset", "publish_time", "event_time", "key", "value", "properties", "producer_name")


def _cell(data: bytes | None) -> dict | None:
    if data is None:
        return None
    shown = data[:MAX_CELL_BYTES]
    try:
        text, fmt = shown.decode("utf-8"), "text"
    except UnicodeDecodeError:
        text, fmt = shown.hex(), "hex"
    return {"format": fmt, "value": text, "size": len(data), "truncated": len(data) > MAX_CELL_BYTES}


def _millis(value) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def read_rows(where, ident: tuple[str, str, str], limit: int) -> dict:
    """The first ``limit`` rows of the table's current snapshot (blocking: run in a thread)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        table = where.open().load_table(ident)
    except (NoSuchTableError, NoSuchNamespaceError):
        return {"exists": False, "note": "no table yet: the compaction worker creates it on its first run"}
    snapshot = table.current_snapshot()
    if snapshot is None:
        return {"exists": True, "snapshotId": None, "rows": [], "note": "the table has no snapshot yet"}
    arrow = table.scan(selected_fields=COLUMNS, limit=limit).to_arrow()
    rows = []
    for row in arrow.to_pylist():
        rows.append({"partition": row["partition"], "offset": row["offset"],
                     "publishTime": _millis(row["publish_time"]), "eventTime": _millis(row["event_time"]),
                     "key": _cell(row["key"]), "value": _cell(row["value"]),
                     "properties": dict(row["properties"] or ()), "producer": row["producer_name"]})
    rows.sort(key=lambda r: (r["partition"], r["offset"]))
    return {"exists": True, "snapshotId": str(snapshot.snapshot_id), "rows": rows[:limit]}


async def get_rows(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request).base
    raw = request.query.get("limit", str(DEFAULT_ROWS))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_ROWS:
        raise AdminError(400, f"limit must be an integer from 1 to {MAX_ROWS}")
    ident = sbt.identifier(str(name))
    if importlib.util.find_spec("pyiceberg") is None:
        return web.json_response({"table": ".".join(ident), "exists": False, "note": tables.NO_EXTRA})
    where = ctx.sbt_catalog
    if where is None or not where.exists:
        note = "no table yet: the compaction worker creates it on its first run" if where is not None else \
            tables.NO_CATALOG
        return web.json_response({"table": ".".join(ident), "exists": False, "note": note})
    answer = await asyncio.to_thread(read_rows, where, ident, int(raw))
    return web.json_response({"table": ".".join(ident), **answer})


__all__ = ["MAX_ROWS", "get_rows", "read_rows"]
