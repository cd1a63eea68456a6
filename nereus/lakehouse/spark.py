"""``nereus``: a Spark 4 Python Data Source over committed topic records.

Batch and streaming reads (``spark.read`` / ``spark.readStream``, see ``streaming.py``)
and writes (``df.write`` / ``df.writeStream``, see ``sink.py``)::

    df = (spark.read.format("nereus")    # found by Spark in the pyspark_nereus package
          .option("metadata", "oxia://127.0.0.1:6648")       # the cluster's metadata (Oxia protocol)
          .option("objects", "file:///var/lib/nereus/objects")  # its object store URL
          .option("topic", "persistent://public/default/t")     # or a short name: "t"
          .load())

Columns: topic, partition (-1 when not partitioned), offset, publish_time, event_time,
key, value, properties, producer_name. A partitioned topic is read in all its partitions.
When the topic has an AVRO or JSON schema, its top-level fields follow as columns decoded
from ``value`` (``schema_columns.py``; option ``schemaColumns=false`` leaves them out).

Options (case-insensitive):

* ``startingOffset`` / ``endingOffset``: ``earliest`` / ``latest`` (the defaults), one
  offset for every partition, or JSON per partition (``{"0": 10, "1": 20}``, ``"-1"`` for a
  non-partitioned topic). The end is exclusive; both are clamped to the stable range
  (trim start, last stable offset: ``latest``) seen when the query is planned.
* ``startingTimestamp``: ms since the epoch; each partition is read from its first
  record published at or after it (``pruning.offset_for_time``); not with startingOffset.
* ``recordsPerPartition`` (default 100000): offsets per Spark input partition; each
  (topic partition, offset chunk) is read by one task.

With ``spark.sql.python.filterPushdown.enabled=true``, filters on partition, offset,
publish_time and event_time prune what is read (``pruning.py``).

Reading a topic that does not exist raises ``rows.TopicNotFound`` (the message names it).
The planner and the tasks talk to the metadata store and the object store directly; no
broker is involved, and only committed records (those the tail record covers) are read:
below the last stable offset (the first offset of the oldest open transaction, else the
tail), and never a record of an aborted transaction (``rows.py``).
Writes go through a broker (``serviceUrl``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path
from collections.abc import AsyncIterator, Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType,
                               TimestampType)

from . import pruning as _pruning
from . import rows as _rows
from . import schema_columns as _columns
from .worker_loop import run_async, worker_loop
from ..ledger.entry import EntryFlags, EntryFormat, decode_entry
from ..codec.pulsar import split_entry
from ..topics.schemas import version_from_bytes

SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("publish_time", TimestampType(), True),
    StructField("event_time", TimestampType(), True),
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("properties", MapType(StringType(), StringType(), True), True),
    StructField("producer_name", StringType(), True),
])
DEFAULT_RECORDS_PER_PARTITION = 100_000
_READ_BYTES = 8 << 20


def register(spark) -> None:
    """Make ``format("nereus")`` available in this session (Spark 4.1 finds it by itself, see pyspark_nereus)."""
    spark.dataSource.register(NereusDataSource)


class NereusRange(InputPartition):
    """One task: offsets ``[range.start, range.end)`` of one stream (and how to add schema columns)."""

    def __init__(self, metadata: str, objects: str, stream_range: _rows.StreamRange,
                 values: _columns.ValueColumns | None = None) -> None:
        super().__init__(stream_range)
        self.metadata = metadata
        self.objects = objects
        self.range = stream_range
        self.values = values


def _option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    return lowered.get(name.lower(), default)


def _required(options: Mapping[str, str], name: str) -> str:
    value = _option(options, name)
    if not value:
        raise ValueError(f"the nereus data source needs the {name!r} option")
    return value


def _flag(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = _option(options, name)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise ValueError(f"the {name!r} option must be true or false, not {value!r}")
    return value.strip().lower() == "true"


def _positive(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    """An optional integer option that must be >= 1."""
    value = _option(options, name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"the {name!r} option must be an integer >= 1, not {value!r}")
    return number


def check_offset_option(name: str, spec: str | None) -> None:
    """Raise ValueError unless ``spec`` is earliest, latest, an offset or a JSON object of them."""
    if spec is None or not spec.strip():
        return
    text = spec.strip()
    values = [text]
    if text.startswith("{"):
        try:
            per = json.loads(text)
        except json.JSONDecodeError:
            per = None
        if not isinstance(per, dict) or not all(_is_partition(k) for k in per):
            raise ValueError(f"bad {name} {spec!r}: a JSON object maps partitions (\"-1\", \"0\", ...) to offsets")
        values = list(per.values())
    for value in values:
        if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
            continue
        try:
            ok = not isinstance(value, bool) and int(value) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"bad {name} {spec!r}: use earliest, latest, an offset >= 0, or JSON per partition")


def _is_partition(key: str) -> bool:
    try:
        return int(key) >= -1
    except ValueError:
        return False


def check_read_options(options: Mapping[str, str]) -> None:
    """Raise ValueError for a malformed read option, before anything is planned."""
    for name in ("startingOffset", "endingOffset"):
        check_offset_option(name, _option(options, name))
    records_per_partition(options)
    starting_timestamp(options)
    _positive(options, "maxRecordsPerTrigger", None)
    _flag(options, "schemaColumns", True)


def starting_timestamp(options: Mapping[str, str]) -> int | None:
    """The ``startingTimestamp`` option (ms since the epoch), checked; None when unset."""
    value = _option(options, "startingTimestamp")
    if value is None:
        return None
    try:
        millis = int(value)
    except ValueError:
        millis = -1
    if millis < 0:
        raise ValueError(f"the 'startingTimestamp' option must be ms since the epoch (>= 0), not {value!r}")
    if _option(options, "startingOffset") is not None:
        raise ValueError("use startingOffset or startingTimestamp, not both")
    return millis


def _offset_for(spec: str | None, partition: int, default: int, earliest: int, latest: int) -> int:
    """Offset given for ``partition`` by a startingOffset/endingOffset option (``default`` when unset)."""

    def one(value) -> int:
        if isinstance(value, str) and value.strip().lower() in ("earliest", "latest"):
            return earliest if value.strip().lower() == "earliest" else latest
        return int(value)

    if spec is None or not spec.strip():
        return default
    spec = spec.strip()
    if not spec.startswith("{"):
        try:
            return one(spec)
        except ValueError:
            raise ValueError(f"bad offset option {spec!r}: earliest, latest, an offset or JSON per partition") from None
    try:
        per = json.loads(spec)
    except json.JSONDecodeError:
        raise ValueError(f"bad offset option {spec!r}: expected a JSON object of partition -> offset") from None
    value = per.get(str(partition))
    return default if value is None else one(value)


class NereusDataSource(DataSource):
    """``format("nereus")``: see the module docstring and ``streaming.py``, ``sink.py``."""

    @classmethod
    def name(cls) -> str:
        return "nereus"

    def schema(self) -> StructType:
        check_read_options(self.options)
        metadata, topic = _option(self.options, "metadata"), _option(self.options, "topic")
        if not (metadata and topic) or not _flag(self.options, "schemaColumns", True):
            return SCHEMA  # a reader without them raises the missing option's error
        return StructType(SCHEMA.fields + run_async(_schema_columns(metadata, topic)))

    def reader(self, schema: StructType) -> "NereusReader":
        # Spark refuses a reader that implements pushFilters unless filter pushdown is on,
        # and asks for one through its pushdown worker only when it is: answer in kind.
        if _called_by("data_source_pushdown_filters"):
            return NereusPushdownReader(dict(self.options), schema)
        return NereusReader(dict(self.options), schema)

    def streamReader(self, schema: StructType):
        from .streaming import NereusStreamReader

        return NereusStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool):
        from .sink import NereusWriter

        return NereusWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .sink import NereusStreamWriter

        return NereusStreamWriter(dict(self.options), schema, overwrite)


def _called_by(module: str) -> bool:
    """Whether a caller up the stack is code of the pyspark worker module ``module``."""
    frame = sys._getframe(1)
    while frame is not None:
        if Path(frame.f_code.co_filename).stem == module:
            return True
        frame = frame.f_back
    return False


async def _schema_columns(metadata: str, topic: str) -> list[StructField]:
    from ..meta import connect

    meta = connect(metadata)
    try:
        schemas = await _columns.topic_schemas(meta, topic)
    finally:
        await meta.close()
    return [] if schemas is None else _columns.columns_for(schemas.definitions[schemas.latest])


async def plan_values(meta, topic: str, schema: StructType) -> _columns.ValueColumns | None:
    """What read tasks need to fill the schema's extra columns (None: there are none)."""
    extra = _columns.extra_columns(schema)
    if not extra:
        return None
    return _columns.ValueColumns(tuple(extra), await _columns.topic_schemas(meta, topic))


async def _plan(reader: "NereusReader") -> tuple[list[_rows.StreamRange], _columns.ValueColumns | None]:
    from ..meta import connect
    from ..objstore import open_object_store

    meta = connect(reader.metadata)
    objects = open_object_store(reader.objects)
    try:
        out: list[_rows.StreamRange] = []
        # Partitions nothing was ever written to have no stream (and no rows).
        for bounds in await _rows.topic_ranges(meta, reader.topic, must_exist=True):
            if not reader.pruning.keeps_partition(bounds.partition):
                continue
            lo = max(bounds.start, _offset_for(reader.starting, bounds.partition, bounds.start, bounds.start,
                                               bounds.end))
            hi = min(bounds.end, _offset_for(reader.ending, bounds.partition, bounds.end, bounds.start, bounds.end))
            lo, hi = reader.pruning.offsets(lo, hi)
            if reader.starting_timestamp is not None and lo < hi:
                lo = max(lo, await _pruning.offset_for_time(meta, objects, bounds, reader.starting_timestamp))
            for first, end in await _pruning.kept_ranges(meta, objects, bounds, lo, hi, reader.pruning):
                out.extend(split_range(bounds, first, end, reader.chunk))
        return out, await plan_values(meta, reader.topic, reader.schema)
    finally:
        await objects.close()
        await meta.close()


def split_range(bounds: _rows.StreamRange, lo: int, hi: int, chunk: int) -> list[_rows.StreamRange]:
    """Offsets ``[lo, hi)`` of the stream of ``bounds`` in ranges of at most ``chunk`` offsets."""
    out = []
    for first in range(lo, hi, chunk):
        end = min(first + chunk, hi)
        aborted = tuple(a for a in bounds.aborted if a[1] < end and a[2] >= first)
        out.append(replace(bounds, start=first, end=end, aborted=aborted))
    return out


def records_per_partition(options: Mapping[str, str]) -> int:
    return _positive(options, "recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION)


class NereusReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        check_read_options(options)
        self.metadata = _required(options, "metadata")
        self.objects = _required(options, "objects")
        self.topic = _required(options, "topic")
        self.starting = _option(options, "startingOffset")
        self.ending = _option(options, "endingOffset")
        self.starting_timestamp = starting_timestamp(options)
        self.chunk = records_per_partition(options)
        self.schema = schema
        self.pruning = _pruning.Pruning()

    def partitions(self) -> list[InputPartition]:
        ranges, values = run_async(_plan(self))
        if not ranges:
            return [InputPartition(None)]  # Spark needs at least one partition: an empty one
        return [NereusRange(self.metadata, self.objects, r, values) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return read_partition(partition)


class NereusPushdownReader(NereusReader):
    """The reader when Spark pushes filters down (``spark.sql.python.filterPushdown.enabled``)."""

    def pushFilters(self, filters):
        return self.pruning.push(filters)


def read_partition(partition: InputPartition) -> Iterator[tuple]:
    """The rows of one planned range (batch and streaming tasks), schema columns appended."""
    if not isinstance(partition, NereusRange):
        return
    loop = worker_loop()
    if partition.values is None:
        yield from _drain(loop, _read_range(partition))
    else:
        decode = _columns.ValueDecoder(partition.values)
        for row, version in _drain(loop, _read_range(partition)):
            yield row + decode(row[6], version)


async def _read_range(p: NereusRange):
    from ..meta import connect
    from ..objstore import open_object_store

    meta = connect(p.metadata)
    objects = open_object_store(p.objects)
    try:
        rows = _rows.read_rows(meta, objects, p.range) if p.values is None else _versioned_rows(meta, objects, p.range)
        async for batch in rows:
            yield batch
    finally:
        await objects.close()
        await meta.close()


async def _versioned_rows(meta, objects, r: _rows.StreamRange) -> AsyncIterator[list[tuple[tuple, int | None]]]:
    """``rows.read_rows`` with each row's schema version: lists of ``(row, version)``."""
    from ..storage.cache import BlockCache, TailCache
    from ..storage.reader import StreamReader

    reader = StreamReader(meta, objects, TailCache(), BlockCache(_READ_BYTES * 2))
    offset = r.start
    aborted = r.txn_view()
    while offset < r.end:
        entries = await reader.read(r.stream_id, offset, r.end, _READ_BYTES)
        if not entries:
            break
        batch = []
        for e in entries:
            version = _schema_version(e.data)
            batch.extend((row, version)
                         for row in _rows.entry_rows(r.topic, r.partition, e.base_offset, e.data, aborted)
                         if r.start <= row[2] < r.end)
        offset = entries[-1].end_offset
        yield batch


def _schema_version(data: bytes | memoryview) -> int | None:
    """The schema version a stored Pulsar entry was written with (None: Kafka, none, unreadable)."""
    try:
        header, body = decode_entry(data)
        if header.format != EntryFormat.PULSAR or header.flags & EntryFlags.CONTROL:
            return None
        meta, _ = split_entry(body)
    except Exception:  # noqa: BLE001 - entry_rows decides what an unreadable entry means
        return None
    return version_from_bytes(meta.schema_version) if meta.HasField("schema_version") else None


def _drain(loop: asyncio.AbstractEventLoop, agen) -> Iterator[tuple]:
    """Rows of an async generator of row lists, pulled one list at a time on ``loop``."""
    try:
        while True:
            try:
                batch = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
            yield from batch
    finally:
        loop.run_until_complete(agen.aclose())


__all__ = ["SCHEMA", "NereusDataSource", "register"]
