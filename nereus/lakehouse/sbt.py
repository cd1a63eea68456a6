"""SBT: every topic as a built-in Iceberg table whose data files ARE its compacted objects.

Zero-copy: the table's data files are the compacted Parquet objects the brokers
read the stream from (``table_format``); nothing is rewritten to register them.
The table's schema holds the record columns only: the entry columns the brokers
read stay in the files, where Iceberg readers (which read the columns of the
table schema, by name mapping) never see them.
``sync`` makes a topic's table list exactly the compacted objects its offset index
refers to: new ones are added, ones replaced or removed by retention are deleted
from the table (a table delete, so no snapshot refers to a missing file), in one
catalog commit whose snapshot summary records the offsets it covers per partition
(``nereus.offsets``: ``{"partition": [[first, end), ...]}``). Each registered object is
pinned (``storage.gc.pin``) until the table no longer lists it, so the collector
never deletes a file a table still lists. ``sync`` is idempotent and repairs what a
crash left (pins without table entries, entries without index records).

The catalog is an Iceberg SQL catalog on SQLite by default (``sqlite:///path``), or
an Iceberg REST catalog (``http(s)://...``). The catalog is never on the ack path:
only the compaction job and this sync talk to it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

from ..ledger.naming import TopicName
from ..meta import MetadataStore
from ..storage import gc, view
from . import rows as _rows
from . import table_format, table_store

log = logging.getLogger(__name__)

OFFSETS_PROPERTY = "nereus.offsets"
#: Snapshots a built-in table keeps (its time travel): older ones are expired by the syncs.
SNAPSHOTS_KEPT = 100
TOPIC_PROPERTY = "nereus.topic"


def open_catalog(catalog_uri: str, warehouse: str, **properties: str):
    """A pyiceberg catalog: SQL (``sqlite:///...`` or any SQLAlchemy URL) or REST (``http(s)://``);
    ``properties``: more catalog properties (FileIO settings)."""
    from .iceberg_catalog import load_catalog

    kind = "rest" if catalog_uri.startswith(("http://", "https://")) else "sql"
    if catalog_uri.startswith("sqlite:///"):  # SQLite creates the file, not the directory it goes in
        os.makedirs(os.path.dirname(catalog_uri[len("sqlite:///"):]) or ".", exist_ok=True)
    return load_catalog("nereus", type=kind, uri=catalog_uri, warehouse=warehouse, **properties)


def store_catalog(catalog_uri: str, objects_url: str):
    """The catalog of the built-in tables of the store at ``objects_url`` (``table_store``: its
    warehouse there, and what reaches that store)."""
    return open_catalog(catalog_uri, table_store.warehouse(objects_url), **table_store.file_io_properties(objects_url))


def identifier(topic: str) -> tuple[str, str, str]:
    """``(tenant, namespace, topic)`` of a topic's table (partitioned: the base topic)."""
    name = TopicName.parse(topic).base
    return name.tenant, name.namespace, name.local


def managed_topics(catalog) -> list[str]:
    """Topics that have a built-in table in ``catalog`` (tables are named ``tenant.namespace.topic``)."""
    out = []
    for tenant in catalog.list_namespaces():  # catalogs list one level at a time: tenants, then theirs
        for namespace in catalog.list_namespaces(tenant) if len(tenant) == 1 else [tenant]:
            if len(namespace) == 2:
                out += [f"persistent://{namespace[0]}/{namespace[1]}/{ident[-1]}"
                        for ident in catalog.list_tables(namespace)]
    return sorted(set(out))


def object_url(objects_url: str, key: str) -> str:
    """Where a table reader finds an object of the store at ``objects_url``."""
    return table_store.object_url(objects_url, key)


@dataclass
class SyncReport:
    """What a sync changed (or, with ``dry_run``, would change) in one table."""

    table: str
    added: int = 0
    removed: int = 0
    offsets: dict[str, list[list[int]]] = field(default_factory=dict)
    created: bool = False  # the table was missing (never made, or dropped by hand)
    dry_run: bool = False
    # The table differed from what the last sync committed (pins record that): it lost a
    # commit, was restored from an older backup, dropped, or lists what a sync removed.
    stale: bool = False


@dataclass(frozen=True, slots=True)
class _DataObject:
    key: str
    partition: int
    first: int
    last: int


async def compacted_objects(meta: MetadataStore, topic: str) -> list[_DataObject]:
    """The compacted objects the offset index of every partition of ``topic`` refers to.

    Groups a compaction replaced stay until it finishes (or the collector finishes it): an
    object whose offsets a later group's object covers (a merge) is not one of them.
    """
    out = []
    for name, partition, stream in await _rows.partitions(meta, topic):
        bounds = await _rows.stream_range(meta, name, partition, stream)
        if bounds is None:
            continue
        found: list[_DataObject] = []
        async for entry in view.indexed_entries(meta, bounds.stream_id):
            if entry.compacted:
                # Groups are keyed by their last offset: a covering group comes after those it covers.
                while found and found[-1].first >= entry.base:
                    found.pop()
                found.append(_DataObject(entry.object, partition, entry.base, entry.last))
        out += found
    return out


def coverage(objects: list[_DataObject]) -> dict[str, list[list[int]]]:
    """Offsets covered per partition, as merged ``[first, end)`` ranges."""
    out: dict[str, list[list[int]]] = {}
    for obj in sorted(objects, key=lambda o: (o.partition, o.first)):
        ranges = out.setdefault(str(obj.partition), [])
        if ranges and ranges[-1][1] >= obj.first:
            ranges[-1][1] = max(ranges[-1][1], obj.last + 1)
        else:
            ranges.append([obj.first, obj.last + 1])
    return out


def _load_or_create(catalog, ident: tuple[str, str, str], topic: str):
    from pyiceberg.transforms import IdentityTransform

    from .iceberg_catalog import ensure_table

    table, created = ensure_table(catalog, ident, table_format.SCHEMA, {TOPIC_PROPERTY: topic})
    if created:
        # Partitioned by topic partition: every compacted object holds exactly one.
        with table.update_spec() as spec:
            spec.add_field("partition", IdentityTransform(), "partition")
        table = catalog.load_table(ident)
    if any(name in table.schema().column_names for name in table_format.ENTRY_COLUMNS):
        try:
            _drop_entry_columns(table)
        except Exception:  # another job dropped them first
            table = catalog.load_table(ident)
            if any(name in table.schema().column_names for name in table_format.ENTRY_COLUMNS):
                raise
        table = catalog.load_table(ident)
    return table


def _drop_entry_columns(table) -> None:
    """Take the entry columns out of the schema, keeping them in the name mapping.

    Dropped columns keep their field ids in the name mapping, as Iceberg keeps them for
    any dropped column: readers resolve every column of the (id-less) files, then read
    those of the schema. The files are not touched.
    """
    from pyiceberg.table import TableProperties

    with table.transaction() as tx:
        if tx.table_metadata.name_mapping() is None:
            mapping = tx.table_metadata.schema().name_mapping.model_dump_json()
            tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING: mapping})
        with tx.update_schema() as update:
            for name in table_format.ENTRY_COLUMNS:
                if name in tx.table_metadata.schema().column_names:
                    update.delete_column(name)


def holder(topic: str) -> str:
    """The pin holder name of the topic's table."""
    return "sbt:" + ".".join(identifier(topic))


async def sync(meta: MetadataStore, catalog, objects_url: str, topic: str, *, dry_run: bool = False,
               pinned: list[str] | None = None) -> SyncReport:
    """Make the topic's table list exactly its compacted objects (see the module docstring).

    ``dry_run``: compare only; the report says what a sync would change (nothing is created,
    committed, pinned or unpinned). ``pinned``: the objects the table's pins hold, when the
    caller scanned the pins for many tables at once.
    """
    import asyncio

    ident = identifier(topic)
    wanted = {object_url(objects_url, o.key): o for o in await compacted_objects(meta, topic)}
    exists = await asyncio.to_thread(catalog.table_exists, ident)
    if dry_run and not exists:
        table, listed = None, {}
    else:
        table = await asyncio.to_thread(_load_or_create, catalog, ident, str(TopicName.parse(topic)))
        listed = await asyncio.to_thread(lambda: {t.file.file_path: t.file for t in table.scan().plan_files()})
    to_add = sorted(path for path in wanted if path not in listed)
    if to_add:  # ranges of markers and aborted records only: no row to list
        io = table.io if table is not None else _file_io(catalog)
        to_add = await asyncio.to_thread(lambda: [p for p in to_add if table_format.holds_records(io, p)])
    to_remove = [listed[path] for path in listed if path not in wanted]
    if pinned is None:  # one table on its own: scan the pins for it
        pinned = await gc.pinned_by(meta, holder(topic))
    pinned = {object_url(objects_url, key): key for key in pinned}
    stale = any(path in wanted and path not in listed for path in pinned) or any(p not in pinned for p in listed)
    report = SyncReport(".".join(ident), len(to_add), len(to_remove), coverage(list(wanted.values())),
                        created=not exists, dry_run=dry_run, stale=stale)
    if dry_run:
        return report
    for path in to_add:  # pinned before the table lists it: the collector can never race the commit
        if path not in pinned:
            await gc.pin(meta, wanted[path].key, holder(topic))
    if to_add or to_remove:
        props = {OFFSETS_PROPERTY: json.dumps(report.offsets, separators=(",", ":"))}
        await asyncio.to_thread(_commit, table, to_add, to_remove, props)
        log.info("sbt %s: +%d -%d data files, offsets %s", report.table, len(to_add), len(to_remove), report.offsets)
    for path, key in pinned.items():  # removed now, or pinned by a sync that crashed before its commit
        if path not in wanted:
            await gc.unpin(meta, key, holder(topic))
    return report


async def drop(meta: MetadataStore, catalog, objects_url: str, topic: str) -> bool:
    """Drop the table of a topic that no longer exists and release its pins; False if it had none."""
    import asyncio

    from pyiceberg.exceptions import NoSuchTableError

    try:
        await asyncio.to_thread(catalog.drop_table, identifier(topic))
        dropped = True
    except NoSuchTableError:
        dropped = False
    await _unpin_all(meta, holder(topic))
    return dropped


def _file_io(catalog):
    from pyiceberg.io import load_file_io

    return load_file_io(catalog.properties)


def _commit(table, to_add: list[str], to_remove: list, props: dict[str, str]) -> None:
    _add_columns(table, to_add)
    with table.transaction() as tx:
        if to_remove:
            with tx.update_snapshot(snapshot_properties=props if not to_add else {}).overwrite() as overwrite:
                for data_file in to_remove:
                    overwrite.delete_data_file(data_file)
        if to_add:
            # Merging appends: a table synced every few seconds keeps a bounded number of manifests.
            with tx.update_snapshot(snapshot_properties=props).merge_append() as append:
                for path in to_add:
                    append.append_data_file(table_format.iceberg_data_file(table.io, tx.table_metadata, path))
    _expire_snapshots(table)


def _expire_snapshots(table) -> None:
    """Keep the newest ``SNAPSHOTS_KEPT`` snapshots (expired once ``SNAPSHOTS_KEPT`` * 1.2 are there): the
    table's metadata stays small however often it is synced. Only metadata goes: files belong to pins."""
    snapshots = sorted(table.metadata.snapshots, key=lambda snap: snap.timestamp_ms)
    if len(snapshots) <= SNAPSHOTS_KEPT * 6 // 5:
        return
    current = table.metadata.current_snapshot_id
    old = [snap.snapshot_id for snap in snapshots[:-SNAPSHOTS_KEPT] if snap.snapshot_id != current]
    table.maintenance.expire_snapshots().by_ids(old).commit()


def _add_columns(table, paths: list[str]) -> None:
    """Add the record columns the files at ``paths`` have and the table lacks (an AVRO/JSON topic's
    schema columns, a new field of a later schema version): a schema-only commit, older files
    read them as null. The name mapping gains the new columns with the update."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    known = {f.name for f in table.schema().fields} | set(table_format.ENTRY_COLUMNS)
    new = []
    for path in paths:
        with table.io.new_input(path).open() as stream:
            for column in pq.read_schema(stream):
                if column.name not in known:
                    known.add(column.name)
                    new.append(column)
    if new:
        with table.update_schema() as update:
            update.union_by_name(pa.schema(new))
        log.info("sbt %s: new columns %s", ".".join(table.name()[1:]), [c.name for c in new])


async def _unpin_all(meta: MetadataStore, pin_holder: str) -> None:
    for key in await gc.pinned_by(meta, pin_holder):
        await gc.unpin(meta, key, pin_holder)


def read_offsets(table) -> dict[str, list[list[int]]]:
    """The per-partition offsets the table's current snapshot covers."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return {}
    value = snapshot.summary.additional_properties.get(OFFSETS_PROPERTY)
    return json.loads(value) if value else {}


def spark_table(spark, catalog, topic: str):
    """The table's current snapshot as a Spark DataFrame of records (without the entry columns).

    Reads the data files the Iceberg snapshot lists, with Spark's own Parquet reader.
    """
    table = catalog.load_table(identifier(topic))
    paths = [t.file.file_path for t in table.scan().plan_files()]
    if not paths:
        return spark.createDataFrame(table_format.RECORD_SCHEMA.empty_table())
    return spark.read.parquet(*paths).select(*table_format.RECORD_COLUMNS)
