"""A Hudi copy-on-write table as a delivery target (written by ``hudi_table``, read by any Hudi reader).

Each append is one ``insert`` commit adding one new file group; each retention delete is
one ``delete`` commit that rewrites the file groups holding rows below the new starts
(copy-on-write: a new slice of the same file group, records kept with the commit time
they were first written at, so incremental reads never see them again).

Columns the rows bring (schema columns, a dead-letter table's reason) widen the table's
schema: each commit records the union of all columns so far (its Avro ``schema`` and the
Arrow schema under ``nereus.columns``); readers give null for them in older files.

An upsert table (record key ``topic,partition,key``) takes ``upsert`` commits: the file
groups holding the batch's keys are rewritten without them and the batch's live rows
(not tombstones) are inserted as a new file group, so each key has one row.

Positions live in every commit's ``extraMetadata`` under ``nereus.offsets``, a JSON
object ``{topic: {partition: [start, end]}}`` of all topics delivered into the table
(carried forward), the way Hudi's own streamers keep their checkpoint in the latest
commit. A commit built on a latest commit another writer has already built on fails
with ``TargetConflict`` (see ``hudi_table``): two jobs never both append the same offsets.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
from collections.abc import Mapping, Sequence

import obstore.exceptions
import pyarrow as pa
import pyarrow.compute as pc

from .deliver import ARROW_SCHEMA, Position, TargetConflict, TargetError, _kill_point
from .hudi_table import META_FIELDS, TABLE_VERSION, CommitConflict, HudiTable, Instant, WriteStat, new_file_id

log = logging.getLogger(__name__)

OFFSETS_KEY = "nereus.offsets"
COLUMNS_KEY = "nereus.columns"  # the table's Arrow schema (base64 IPC): the union of all commits' columns
SCHEMA_KEY = "schema"  # Hudi's extraMetadata key of the writer's Avro schema
RECORD_KEY_FIELDS = ("topic", "partition", "offset")
UPSERT_KEY_FIELDS = ("topic", "partition", "key")
_LOCATOR = ["topic", "partition", "offset"]


def avro_schema(name: str, schema: pa.Schema = ARROW_SCHEMA) -> str:
    """The Avro schema Hudi records for rows of ``schema`` (without the meta fields)."""
    records = iter(range(1, 1 << 30))

    def nullable(kind):
        return ["null", kind]

    def avro(t: pa.DataType):
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return "string"
        if pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return "bytes"
        if pa.types.is_boolean(t):
            return "boolean"
        if pa.types.is_int64(t):
            return "long"
        if pa.types.is_integer(t):
            return "int"
        if pa.types.is_float32(t):
            return "float"
        if pa.types.is_floating(t):
            return "double"
        if pa.types.is_date32(t):
            return {"type": "int", "logicalType": "date"}
        if pa.types.is_timestamp(t):
            unit = {"ms": "millis", "us": "micros"}.get(t.unit)
            if unit is not None:
                return {"type": "long", "logicalType": f"{'' if t.tz else 'local-'}timestamp-{unit}"}
        if pa.types.is_decimal(t):
            return {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
        if pa.types.is_map(t):
            return {"type": "map", "values": nullable(avro(t.item_type))}
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return {"type": "array", "items": nullable(avro(t.value_type))}
        if pa.types.is_struct(t):
            return {"type": "record", "name": f"{name}_struct_{next(records)}",
                    "fields": [{"name": f.name, "type": nullable(avro(f.type)), "default": None} for f in t]}
        raise TargetError(f"a column of type {t} has no Avro type for a Hudi table")

    fields = [{"name": f.name, "type": avro(f.type)} if not f.nullable else
              {"name": f.name, "type": nullable(avro(f.type)), "default": None} for f in schema]
    return json.dumps({"type": "record", "name": f"{name}_record", "namespace": f"hoodie.{name}", "fields": fields},
                      separators=(",", ":"))


def table_properties(name: str, key_fields: Sequence[str] = RECORD_KEY_FIELDS) -> dict[str, str]:
    return {
        "hoodie.table.name": name,
        "hoodie.table.type": "COPY_ON_WRITE",
        "hoodie.table.version": str(TABLE_VERSION),
        "hoodie.table.initial.version": str(TABLE_VERSION),
        "hoodie.timeline.layout.version": "2",
        "hoodie.timeline.path": "timeline",
        "hoodie.table.timeline.timezone": "UTC",
        "hoodie.table.base.file.format": "PARQUET",
        "hoodie.table.recordkey.fields": ",".join(key_fields),
        "hoodie.table.partition.fields": "",
        "hoodie.table.keygenerator.class": "org.apache.hudi.keygen.NonpartitionedKeyGenerator",
        "hoodie.populate.meta.fields": "true",
        "hoodie.record.merge.mode": "COMMIT_TIME_ORDERING",
        "hoodie.table.create.schema": avro_schema(name),
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.datasource.write.hive_style_partitioning": "false",
    }


def table_name(uri: str) -> str:
    """A Hudi table name from the last component of ``uri`` (letters, digits and ``_``)."""
    last = uri.rstrip("/").rsplit("/", 1)[-1]
    return re.sub(r"\W", "_", last) or "nereus"


def record_keys(rows: pa.Table, key_fields: Sequence[str] = RECORD_KEY_FIELDS) -> list[str]:
    """Hudi's complex record keys (``field:value,...``) of ``rows`` (a binary key in hex)."""
    columns = [rows.column(name).to_pylist() for name in key_fields]
    return [",".join(f"{name}:{value.hex() if isinstance(value, bytes) else value}"
                     for name, value in zip(key_fields, values)) for values in zip(*columns)]


def below(rows: pa.Table, topic: str, starts: Mapping[int, int]) -> pa.ChunkedArray:
    """A mask of ``rows`` of ``topic`` below each partition's start."""
    mask = pa.chunked_array([pa.array([False] * rows.num_rows)])
    for partition, start in starts.items():
        mask = pc.or_(mask, pc.and_(pc.equal(rows["partition"], partition), pc.less(rows["offset"], start)))
    return pc.and_(pc.equal(rows["topic"], topic), mask)


@contextlib.contextmanager
def _store_errors(uri: str):
    """The object store's failures (unreachable, refused, misconfigured) as ``TargetError``."""
    try:
        yield
    except obstore.exceptions.BaseError as exc:
        raise TargetError(f"the hudi table {uri}: {str(exc).splitlines()[0]}") from None


class HudiTarget:
    """Delivers into the Hudi table at ``uri`` (created if missing)."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None, *, upsert: bool = False) -> None:
        self.description = f"hudi {'upsert ' if upsert else ''}table {uri}"
        self._keys = UPSERT_KEY_FIELDS if upsert else RECORD_KEY_FIELDS
        try:
            with _store_errors(uri):
                self._table = HudiTable(uri, storage_options)
                stored = self._table.create(table_properties(table_name(uri), self._keys))
        except (OSError, ValueError, RuntimeError) as exc:
            raise TargetError(f"cannot open or create the hudi table {uri}: {exc}") from exc
        stored_keys = stored.get("hoodie.table.recordkey.fields")
        if stored.get("hoodie.table.type", "").upper() != "COPY_ON_WRITE" \
                or stored_keys not in (",".join(RECORD_KEY_FIELDS), ",".join(UPSERT_KEY_FIELDS)):
            raise TargetError(f"the hudi table {uri} is not a delivered table (type "
                              f"{stored.get('hoodie.table.type')}, record keys {stored_keys})")
        if stored_keys != ",".join(self._keys):
            modes = {",".join(RECORD_KEY_FIELDS): "append", ",".join(UPSERT_KEY_FIELDS): "upsert"}
            raise TargetError(f"the hudi table {uri} is an {modes[stored_keys]} table, not an "
                              f"{'upsert' if upsert else 'append'} table")
        self._name = stored["hoodie.table.name"]
        self._base: Instant | None = None
        self._offsets: dict[str, dict[str, list[int]]] = {}
        self._columns = ARROW_SCHEMA

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, Position]:
        with _store_errors(self._table.uri):
            return self._positions(topic, partitions)

    def _positions(self, topic: str, partitions: Sequence[int]) -> dict[int, Position]:
        self._base = self._table.latest()  # the latest commit, whoever made it
        extra = self._table.metadata(self._base).get("extraMetadata") or {} if self._base else {}
        self._offsets = json.loads(extra.get(OFFSETS_KEY, "{}"))
        if COLUMNS_KEY in extra:
            self._columns = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(extra[COLUMNS_KEY])))
        mine = self._offsets.get(topic, {})
        out = {p: Position(*mine[str(p)]) for p in partitions if str(p) in mine}
        log.debug("%s at %s: positions %s", self.description, self._base, out)
        return out

    def _widen(self, schema: pa.Schema) -> None:
        """The table's columns with those of ``schema`` it lacks added (recorded by the next commit)."""
        extra = [f for f in schema if f.name not in self._columns.names]
        if extra:
            self._columns = pa.schema(list(self._columns) + extra)

    def append(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        with _store_errors(self._table.uri):
            return self._append(topic, rows, positions)

    def _append(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        self._widen(rows.schema)
        at = self._table.begin(self._base)
        stats = []
        if rows.num_rows:
            file_id = new_file_id()
            path = self._table.write_base_file(file_id, at, rows, record_keys(rows, self._keys))
            stats.append(WriteStat(file_id, path, None, rows.num_rows, rows.num_rows, 0, self._table.size_of(path)))
        self._commit(at, "insert", stats, topic, positions)

    def upsert(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        with _store_errors(self._table.uri):
            return self._upsert(topic, rows, positions)

    def _upsert(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        self._widen(rows.schema)
        at = self._table.begin(self._base)
        replaced = pa.array(set(record_keys(rows, self._keys)), pa.string())
        stats = self._rewrite(at, ["_hoodie_record_key"],
                              lambda found: pc.is_in(found["_hoodie_record_key"], value_set=replaced))
        live = rows.filter(pc.is_valid(rows["value"]))
        if live.num_rows:
            file_id = new_file_id()
            path = self._table.write_base_file(file_id, at, live, record_keys(live, self._keys))
            stats.append(WriteStat(file_id, path, None, live.num_rows, live.num_rows, 0, self._table.size_of(path)))
        self._commit(at, "upsert", stats, topic, positions)

    def delete_below(self, topic: str, positions: Mapping[int, Position]) -> None:
        with _store_errors(self._table.uri):
            return self._delete_below(topic, positions)

    def _delete_below(self, topic: str, positions: Mapping[int, Position]) -> None:
        starts = {p: pos.start for p, pos in positions.items()}
        at = self._table.begin(self._base)
        stats = self._rewrite(at, _LOCATOR, lambda found: below(found, topic, starts))
        self._commit(at, "delete", stats, topic, positions)

    def _rewrite(self, at: str, columns: list[str], doomed) -> list[WriteStat]:
        """Write a new slice, at ``at``, of each live file group with rows ``doomed`` selects, without them."""
        stats = []
        for file_id, (path, written_at) in self._live_files().items():
            if not pc.any(doomed(self._table.read_base_file(path, columns))).as_py():
                continue
            old = self._table.read_base_file(path)
            kept = old.filter(pc.invert(doomed(old)))
            new = self._table.write_base_file(
                file_id, at, kept.drop_columns(list(META_FIELDS)),
                kept["_hoodie_record_key"].to_pylist(), seqnos=kept["_hoodie_commit_seqno"].to_pylist(),
                commit_times=kept["_hoodie_commit_time"].to_pylist())
            stats.append(WriteStat(file_id, new, written_at, kept.num_rows, 0, old.num_rows - kept.num_rows,
                                   self._table.size_of(new)))
        return stats

    def _live_files(self) -> dict[str, tuple[str, str]]:
        """Each file group's latest base file (and the instant that wrote it) as of the latest commit."""
        out: dict[str, tuple[str, str]] = {}
        for instant in self._table.completed():
            if self._base is None or instant.time > self._base.time:
                break
            for stats in (self._table.metadata(instant).get("partitionToWriteStats") or {}).values():
                for stat in stats:
                    out[stat["fileId"]] = (stat["path"], instant.time)
        return out

    def _commit(self, at: str, operation: str, stats: list[WriteStat], topic: str,
                positions: Mapping[int, Position]) -> None:
        offsets = {t: dict(parts) for t, parts in self._offsets.items()}
        offsets.setdefault(topic, {}).update({str(p): [pos.start, pos.end] for p, pos in positions.items()})
        extra = {OFFSETS_KEY: json.dumps(offsets, sort_keys=True, separators=(",", ":")),
                 SCHEMA_KEY: avro_schema(self._name, self._columns),
                 COLUMNS_KEY: base64.b64encode(self._columns.serialize().to_pybytes()).decode()}
        try:
            self._base = self._table.commit(self._base, at, operation, stats, extra,
                                            on_decided=lambda: _kill_point("hudi-decided"))
        except CommitConflict as exc:
            raise TargetConflict(str(exc)) from exc
        self._offsets = offsets

    def close(self) -> None:
        pass  # every call opens what it reads
