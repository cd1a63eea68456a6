"""``df.write`` / ``df.writeStream`` ``.format("nereus")``: rows produced to a topic through a broker.

    (df.write.format("nereus").mode("append")
       .option("serviceUrl", "pulsar://127.0.0.1:6650").option("topic", "t").save())

Input columns: ``value`` (binary or string, required; null makes a null-value message),
``key`` (string, or binary that is UTF-8: Pulsar's partition key), ``properties``
(map<string,string>; null values are left out) and ``event_time`` (timestamp). Other
columns are ignored, so a DataFrame read with the ``nereus`` source can be written back.

Options: ``serviceUrl`` and ``topic`` (required); ``sinkId`` (streaming: names the
producers instead of the query id, see below); ``batching`` (default false; true is
faster but gives up exactly-once, see below); ``sendTimeoutMs`` (default 30000).

How replays are made harmless: each Spark task produces with producer name
``spark-{id}-{task partition}`` (``id``: the ``sinkId`` option or the streaming query's
id, which survives restarts from the same checkpoint; a fresh id per batch write job) and
sequence id ``(micro-batch id << 32) + row index + 1``, increasing across micro-batches.
Rows go to topic partitions by a hash of the key (Java's String.hashCode, as the Java
client's default router) or, without a key, by row index, so a replay routes every row as
before. A producer first skips the rows the broker already has (its last sequence id,
reported on connect), and the broker's deduplication drops any other resend.

Guarantees: with deduplication on for the topic's namespace (``POST
/admin/v2/namespaces/{tenant}/{ns}/deduplication`` with ``true``; also the broker default
here) a replayed micro-batch or a retried task adds nothing: exactly once, provided the
replay produces the same rows in the same task partitions and order (a deterministic plan
over a replayable source such as ``nereus``) and the topic's partition count did not
change in between. With deduplication off, or ``batching=true`` (a batch is deduplicated
by its first sequence id only), replays may duplicate: at least once. A ``sinkId`` must
change when the checkpoint is reset, or the new query's rows look like old ones and are
skipped. Nothing is rolled back on abort: rows of a failed batch write stay written.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType, TimestampType

from .options import flag, option, positive, required

BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's local properties of a micro-batch's tasks
QUERY_ID_PROPERTY = "sql.streaming.queryId"
_ROWS_PER_BATCH = 1 << 32  # row indexes of one task in one micro-batch, below the batch id's bits
_MAX_PENDING = 1000


def check_input_schema(schema: StructType) -> None:
    """Raise ValueError unless the columns the sink reads have types it can produce."""
    fields = {f.name: f.dataType for f in schema.fields}
    allowed = {"value": (BinaryType, StringType), "key": (BinaryType, StringType), "event_time": (TimestampType,)}
    if "value" not in fields:
        raise ValueError("the nereus sink needs a 'value' column (binary or string); its input has "
                         f"{sorted(fields)}")
    for name, types in allowed.items():
        if name in fields and not isinstance(fields[name], types):
            raise ValueError(f"the nereus sink's {name!r} column must be "
                             f"{' or '.join(t.typeName() for t in types)}, not {fields[name].simpleString()}")
    props = fields.get("properties")
    if props is not None and not (isinstance(props, MapType) and isinstance(props.keyType, StringType)
                                  and isinstance(props.valueType, StringType)):
        raise ValueError(f"the nereus sink's 'properties' column must be map<string,string>, not "
                         f"{props.simpleString()}")


@dataclass(frozen=True)
class SinkOptions:
    service_url: str
    topic: str
    batching: bool
    send_timeout_ms: int
    sink_id: str | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        return cls(required(options, "serviceUrl"), required(options, "topic"), flag(options, "batching", False),
                   positive(options, "sendTimeoutMs", 30_000), option(options, "sinkId"))


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What one task did: rows sent, and rows skipped because the broker already had them."""

    partition: int
    sent: int
    skipped: int


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def target_partition(key: str | None, row_index: int, task_partition: int, partitions: int) -> int:
    """The topic partition of a row; the same on every replay of the same rows."""
    if partitions <= 1:
        return 0
    if key:
        return (java_string_hash(key) & 0x7FFFFFFF) % partitions
    return (task_partition + row_index) % partitions


def _message(row) -> tuple[bytes | None, str | None, dict[str, str] | None, int | None]:
    """(content, partition key, properties, event time in ms) of an input row."""
    fields = row.asDict() if hasattr(row, "asDict") else dict(row)
    value = fields["value"]
    content = value.encode("utf-8") if isinstance(value, str) else (None if value is None else bytes(value))
    key = fields.get("key")
    if isinstance(key, (bytes, bytearray)):
        try:
            key = bytes(key).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the nereus sink takes binary keys only when they are UTF-8 (a Pulsar partition "
                             "key is a string)") from None
    props = fields.get("properties")
    props = {str(k): str(v) for k, v in props.items() if v is not None} if props else None
    when = fields.get("event_time")
    event_ms = int(when.timestamp() * 1000) if isinstance(when, datetime) else 0
    return content, key or None, props, event_ms if event_ms > 0 else None  # Pulsar: 0 is "no event time"


def produce(rows: Iterator, options: SinkOptions, producer_name: str, batch_id: int, task_partition: int) -> SinkCommit:
    """Send one task's rows and wait until the broker has them all (raises on any failure)."""
    import pulsar  # the official client; only tasks that write need it

    client = pulsar.Client(options.service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))  # not a line per producer
    producers: dict[int, tuple[object, int]] = {}  # topic partition -> (producer, last sequence id it has)
    failures: list[str] = []
    lock = threading.Lock()

    def sent(result, _message_id) -> None:
        if result != pulsar.Result.Ok:
            with lock:
                failures.append(str(result))

    try:
        targets = client.get_topic_partitions(options.topic)
        sent_count = skipped = 0
        for index, row in enumerate(rows):
            if index >= _ROWS_PER_BATCH - 1:
                raise ValueError(f"the nereus sink takes at most {_ROWS_PER_BATCH - 1} rows per task and batch")
            content, key, props, event_ms = _message(row)
            target = target_partition(key, index, task_partition, len(targets))
            if target not in producers:
                producer = client.create_producer(
                    targets[target], producer_name=producer_name, batching_enabled=options.batching,
                    block_if_queue_full=True, max_pending_messages=_MAX_PENDING,
                    send_timeout_millis=options.send_timeout_ms)
                producers[target] = (producer, producer.last_sequence_id())
            producer, persisted = producers[target]
            sequence_id = batch_id * _ROWS_PER_BATCH + index + 1  # never 0: the client ignores a 0 id
            if sequence_id <= persisted:
                skipped += 1  # a replay: the broker stored this row already
                continue
            producer.send_async(content, sent, properties=props, partition_key=key, sequence_id=sequence_id,
                                event_timestamp=event_ms)
            sent_count += 1
            if failures:
                break
        for producer, _ in producers.values():
            producer.flush()
        if failures:
            raise RuntimeError(f"the broker refused messages for {options.topic}: {failures[0]}")
        return SinkCommit(task_partition, sent_count, skipped)
    finally:
        for producer, _ in producers.values():
            producer.close()
        client.close()


def _task():
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the nereus sink writes from Spark tasks only")
    return context


class NereusWriter(DataSourceWriter):
    """``df.write.format("nereus")``: one producer name per job and task, so task retries deduplicate."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("a topic is append-only: write with mode('append')")
        check_input_schema(schema)
        self.options = SinkOptions.parse(options)
        self.job = uuid.uuid4().hex[:12]  # made once on the driver, shipped to every task

    def write(self, iterator: Iterator) -> SinkCommit:
        partition = _task().partitionId()
        return produce(iterator, self.options, f"spark-{self.job}-{partition}", 0, partition)


class NereusStreamWriter(DataSourceStreamWriter):
    """``df.writeStream.format("nereus")``: producer names from the query id, sequence ids from the batch id."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        check_input_schema(schema)
        self.options = SinkOptions.parse(options)

    def write(self, iterator: Iterator) -> SinkCommit:
        context = _task()
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        sink_id = self.options.sink_id or context.getLocalProperty(QUERY_ID_PROPERTY)
        if batch_id is None or not sink_id:
            raise RuntimeError("the nereus stream sink found no micro-batch id in its task")
        partition = context.partitionId()
        return produce(iterator, self.options, f"spark-{sink_id}-{partition}", int(batch_id), partition)

    def commit(self, messages, batchId: int) -> None:
        """Nothing to do: every task waited until the broker had its rows."""

    def abort(self, messages, batchId: int) -> None:
        """Nothing to undo: produced rows stay; a replay of the batch is deduplicated."""


__all__ = ["NereusStreamWriter", "NereusWriter", "SinkCommit", "SinkOptions", "check_input_schema",
           "java_string_hash", "produce", "target_partition"]
