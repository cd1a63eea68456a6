"""``nereus``: a Spark 4 Python Data Source for batch reads of committed topic records.

    from nereus.lakehouse.spark import register
    register(spark)
    df = (spark.read.format("nereus")
          .option("metadata", "oxia://127.0.0.1:6648")       # the cluster's metadata (Oxia protocol)
          .option("objects", "file:///var/lib/nereus/objects")  # its object store URL
          .option("topic", "persistent://public/default/t")     # or a short name: "t"
          .load())

Columns: topic, partition (-1 when not partitioned), offset, publish_time, event_time,
key, value, properties, producer_name. A partitioned topic is read in all its partitions.

Options (case-insensitive):

* ``startingOffset`` / ``endingOffset``: ``earliest`` / ``latest`` (the defaults), one
  offset for every partition, or JSON per partition (``{"0": 10, "1": 20}``, ``"-1"`` for a
  non-partitioned topic). The end is exclusive; both are clamped to the committed range
  (trim start, tail) seen when the query is planned.
* ``recordsPerPartition`` (default 100000): offsets per Spark input partition; each
  (topic partition, offset chunk) is read by one task.

The planner and the tasks talk to the metadata store and the object store directly; no
broker is involved, and only committed records (those the tail record covers) are read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType,
                               TimestampType)

from . import rows as _rows

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


def register(spark) -> None:
    """Make ``spark.read.format("nereus")`` available in this session."""
    spark.dataSource.register(NereusDataSource)


class NereusRange(InputPartition):
    """One task: offsets ``[range.start, range.end)`` of one stream."""

    def __init__(self, metadata: str, objects: str, stream_range: _rows.StreamRange) -> None:
        super().__init__(stream_range)
        self.metadata = metadata
        self.objects = objects
        self.range = stream_range


def _option(options: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    lowered = {k.lower(): v for k, v in options.items()}
    return lowered.get(name.lower(), default)


def _required(options: Mapping[str, str], name: str) -> str:
    value = _option(options, name)
    if not value:
        raise ValueError(f"the nereus data source needs the {name!r} option")
    return value


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
    @classmethod
    def name(cls) -> str:
        return "nereus"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> "NereusReader":
        return NereusReader(dict(self.options))


async def _plan(metadata: str, topic: str, starting: str | None, ending: str | None,
                chunk: int) -> list[_rows.StreamRange]:
    from ..meta import connect

    meta = connect(metadata)
    try:
        out: list[_rows.StreamRange] = []
        for name, partition, stream in await _rows.partitions(meta, topic):
            bounds = await _rows.stream_range(meta, name, partition, stream)
            if bounds is None:
                continue  # a partition nothing was ever written to
            lo = max(bounds.start, _offset_for(starting, partition, bounds.start, bounds.start, bounds.end))
            hi = min(bounds.end, _offset_for(ending, partition, bounds.end, bounds.start, bounds.end))
            for first in range(lo, hi, chunk):
                out.append(_rows.StreamRange(name, partition, stream, bounds.stream_id, first, min(first + chunk, hi)))
        return out
    finally:
        await meta.close()


class NereusReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.metadata = _required(options, "metadata")
        self.objects = _required(options, "objects")
        self.topic = _required(options, "topic")
        self.starting = _option(options, "startingOffset")
        self.ending = _option(options, "endingOffset")
        self.chunk = int(_option(options, "recordsPerPartition", str(DEFAULT_RECORDS_PER_PARTITION)))
        if self.chunk < 1:
            raise ValueError("recordsPerPartition must be >= 1")

    def partitions(self) -> list[InputPartition]:
        ranges = asyncio.run(_plan(self.metadata, self.topic, self.starting, self.ending, self.chunk))
        if not ranges:
            return [InputPartition(None)]  # Spark needs at least one partition: an empty one
        return [NereusRange(self.metadata, self.objects, r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        if not isinstance(partition, NereusRange):
            return
        loop = asyncio.new_event_loop()
        try:
            yield from _drain(loop, _read_range(partition))
        finally:
            loop.close()


async def _read_range(p: NereusRange):
    from ..meta import connect
    from ..objstore import open_object_store

    meta = connect(p.metadata)
    objects = open_object_store(p.objects)
    try:
        async for batch in _rows.read_rows(meta, objects, p.range):
            yield batch
    finally:
        await objects.close()
        await meta.close()


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
