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

* ``walAuthParams``: a token for the brokers' WAL services (``token:<jwt>``, ``file:///path``,
  a superuser's, as ``brokerClientAuthenticationParameters``); with ``walTlsCertFile``,
  ``walTlsKeyFile`` and ``walTlsTrustCertsFile`` for services behind ``brokerClientTlsEnabled``.
  Records acknowledged on WAL replicas (the ``replicated`` and ``local`` profiles) and not
  uploaded yet are read there; a task that cannot reach them waits for the upload, for up to
  ``walUploadWaitSeconds`` (default 120).

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

import sys
from pathlib import Path
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType,
                               TimestampType)

from . import pruning as _pruning
from . import rows as _rows
from . import schema_columns as _columns
from .options import check_read_options, flag, offset_for, option, set_read_options
from .read_tasks import NereusRange, plan_values, read_partition, split_range
from .sink import NereusStreamWriter, NereusWriter
from .streaming import NereusStreamReader
from .worker_loop import run_async

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


def register(spark) -> None:
    """Make ``format("nereus")`` available in this session (Spark 4.1 finds it by itself, see pyspark_nereus)."""
    spark.dataSource.register(NereusDataSource)


class NereusDataSource(DataSource):
    """``format("nereus")``: see the module docstring and ``streaming.py``, ``sink.py``."""

    @classmethod
    def name(cls) -> str:
        return "nereus"

    def schema(self) -> StructType:
        check_read_options(self.options)
        metadata, topic = option(self.options, "metadata"), option(self.options, "topic")
        if not (metadata and topic) or not flag(self.options, "schemaColumns", True):
            return SCHEMA  # a reader without them raises the missing option's error
        return StructType(SCHEMA.fields + run_async(_schema_columns(metadata, topic)))

    def reader(self, schema: StructType) -> "NereusReader":
        # Spark refuses a reader that implements pushFilters unless filter pushdown is on,
        # and asks for one through its pushdown worker only when it is: answer in kind.
        if _called_by("data_source_pushdown_filters"):
            return NereusPushdownReader(dict(self.options), schema)
        return NereusReader(dict(self.options), schema)

    def streamReader(self, schema: StructType):
        return NereusStreamReader(dict(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool):
        return NereusWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
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
            lo = max(bounds.start, offset_for(reader.starting, bounds.partition, bounds.start, bounds.start,
                                               bounds.end))
            hi = min(bounds.end, offset_for(reader.ending, bounds.partition, bounds.end, bounds.start, bounds.end))
            lo, hi = reader.pruning.offsets(lo, hi)
            if reader.starting_timestamp is not None and lo < hi:
                lo = max(lo, await _pruning.offset_for_time(meta, objects, bounds, reader.starting_timestamp))
            for first, end in await _pruning.kept_ranges(meta, objects, bounds, lo, hi, reader.pruning):
                out.extend(split_range(bounds, first, end, reader.chunk))
        return out, await plan_values(meta, reader.topic, reader.schema)
    finally:
        await objects.close()
        await meta.close()


class NereusReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        set_read_options(self, options, schema)
        self.ending = option(options, "endingOffset")
        self.pruning = _pruning.Pruning()

    def partitions(self) -> list[InputPartition]:
        ranges, values = run_async(_plan(self))
        if not ranges:
            return [InputPartition(None)]  # Spark needs at least one partition: an empty one
        return [NereusRange(self.metadata, self.objects, r, values, self.wal_access) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return read_partition(partition)


class NereusPushdownReader(NereusReader):
    """The reader when Spark pushes filters down (``spark.sql.python.filterPushdown.enabled``)."""

    def pushFilters(self, filters):
        return self.pruning.push(filters)


__all__ = ["SCHEMA", "NereusDataSource", "register"]
