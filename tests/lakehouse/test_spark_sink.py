"""``df.write`` / ``df.writeStream`` ``.format("nereus")`` against a real standalone: rows
produced with the official client, read back with the batch source; a replayed
micro-batch is dropped by the broker's deduplication (and duplicated without it)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

pyspark = pytest.importorskip("pyspark")
pulsar = pytest.importorskip("pulsar")

from tests.standalone_process import Standalone  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402




def _options(node: Standalone, topic: str) -> dict[str, str]:
    return {"metadata": f"oxia://127.0.0.1:{node.ports['oxia']}",
            "objects": (node.data_dir / "objects").resolve().as_uri(), "topic": topic}


def _read(spark, node: Standalone, topic: str):
    return spark.read.format("nereus").options(**_options(node, topic)).load()


def _write(df, node: Standalone, topic: str, **options: str) -> None:
    df.write.format("nereus").mode("append").option("serviceUrl", node.url).option("topic", topic) \
        .options(**options).save()


def test_batch_write_then_read_back(spark, standalone):
    topic = "persistent://public/default/sink-batch"
    when = datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
    rows = [(f"v-{i}", f"k{i % 4}" if i % 3 else None, {"i": str(i), "n": None} if i % 2 else None, when)
            for i in range(40)]
    df = spark.createDataFrame(rows, "value string, key string, properties map<string,string>, event_time timestamp")
    _write(df.repartition(3), standalone, topic)

    got = {bytes(r.value).decode(): r for r in _read(spark, standalone, topic).collect()}
    assert len(got) == 40
    for value, key, props, _ in rows:
        row = got[value]
        assert row.key == (key.encode() if key else None)
        assert row.properties == ({"i": props["i"]} if props else {})  # null property values are left out
        assert row.event_time.timestamp() == when.timestamp()  # collect() gives naive local times
        assert row.producer_name.startswith("spark-")


def test_binary_columns_null_values_and_partitioned_topic(spark, standalone):
    topic = "persistent://public/default/sink-parts"
    _admin(standalone, "PUT", "/persistent/public/default/sink-parts/partitions", 3)
    rows = [(bytes([i, 0, 255]) if i % 5 else None, f"key-{i % 6}".encode()) for i in range(60)]
    _write(spark.createDataFrame(rows, "value binary, key binary").repartition(2), standalone, topic)

    got = _read(spark, standalone, topic).collect()
    # on failure, tell stored duplicates (distinct offsets) from read duplicates (one offset twice)
    where = sorted((r.partition, r.offset, r.key, r.producer_name) for r in got)
    assert sorted((r.value is None, r.key) for r in got) == sorted((v is None, k) for v, k in rows), where
    assert {bytes(r.value) for r in got if r.value is not None} == {v for v, _ in rows if v is not None}
    by_key = {}
    for r in got:
        by_key.setdefault(r.key, set()).add(r.partition)
    assert all(len(parts) == 1 for parts in by_key.values())  # one key, one partition
    assert len({p for parts in by_key.values() for p in parts}) > 1


@pytest.mark.parametrize("schema, mode, message", [
    ("key string", "append", "needs a 'value' column"),
    ("value int", "append", "'value' column must be binary or string"),
    ("value string, properties map<string,int>", "append", "map<string,string>"),
    ("value string", "overwrite", "append-only"),
])
def test_bad_input(spark, standalone, schema, mode, message):
    df = spark.createDataFrame([], schema)
    with pytest.raises(Exception, match=message):
        df.write.format("nereus").mode(mode).option("serviceUrl", standalone.url).option("topic", "sink-bad").save()


def test_bad_options(spark, standalone):
    df = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(Exception, match="serviceUrl"):
        df.write.format("nereus").mode("append").option("topic", "sink-bad").save()
    with pytest.raises(Exception, match="batching"):
        _write(df, standalone, "sink-bad", batching="maybe")


def test_partial_replay_sends_only_the_rest(standalone):
    """A task that died after some sends: its retry skips what the broker has and sends the rest."""
    from pyspark.sql import Row

    from nereus.lakehouse.sink import SinkOptions, produce

    topic = "persistent://public/default/sink-partial"
    # the send timeout bounds a hang only
    options = SinkOptions(standalone.url, topic, batching=False, send_timeout_ms=180_000, sink_id=None)
    rows = [Row(value=f"r-{i}") for i in range(20)]
    assert produce(iter(rows[:8]), options, "spark-partial-0", 3, 0).sent == 8
    again = produce(iter(rows), options, "spark-partial-0", 3, 0)
    assert (again.sent, again.skipped) == (12, 8)
    later = produce(iter(rows[:5]), options, "spark-partial-0", 4, 0)  # the next micro-batch: new sequence ids
    assert (later.sent, later.skipped) == (5, 0)

    client = pulsar.Client(standalone.url)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(180_000).data().decode() for _ in range(25)]  # bounds a hang only
    assert not reader.has_message_available()
    client.close()
    assert got == [f"r-{i}" for i in range(20)] + [f"r-{i}" for i in range(5)]


def _drop_last_commit(checkpoint) -> int:
    """Forget that the last micro-batch committed, as a crash after its output and before its commit would."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    crc = checkpoint / "commits" / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


def _copy_twice(spark, node: Standalone, source: str, target: str, checkpoint) -> tuple[dict, int]:
    """Stream ``source`` into ``target``, stop, forget the last commit, produce more, restart.

    Returns value -> count of the source, and how many rows the replayed batch had.
    """
    client = pulsar.Client(node.url)
    producer = client.create_producer(source, batching_enabled=True, batching_max_publish_delay_ms=5)
    for i in range(60):
        producer.send_async(f"{source}-{i}".encode(), None, partition_key=f"k{i % 5}", properties={"i": str(i)})
    producer.flush()

    def start():
        df = spark.readStream.format("nereus").options(**_options(node, source)).load()
        return (df.select("value", "key", "properties").writeStream.format("nereus")
                .option("serviceUrl", node.url).option("topic", target)
                .option("checkpointLocation", str(checkpoint)).trigger(processingTime="100 milliseconds").start())

    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    replayed = _drop_last_commit(checkpoint)
    replayed_rows = sum(p["numInputRows"] for p in query.recentProgress if p["batchId"] == replayed)
    for i in range(60, 80):
        producer.send_async(f"{source}-{i}".encode(), None, partition_key=f"k{i % 5}", properties={"i": str(i)})
    producer.flush()
    client.close()
    query = start()
    try:
        query.processAllAvailable()
        assert query.recentProgress[0]["batchId"] == replayed  # the restart wrote that batch again
        assert query.recentProgress[0]["numInputRows"] == replayed_rows
    finally:
        query.stop()
    return {f"{source}-{i}".encode(): 1 for i in range(80)}, replayed_rows


def _values(spark, node: Standalone, topic: str) -> dict[bytes, int]:
    counts: dict[bytes, int] = {}
    for r in _read(spark, node, topic).collect():
        counts[bytes(r.value)] = counts.get(bytes(r.value), 0) + 1
        assert r.properties == {"i": bytes(r.value).decode().rsplit("-", 1)[1]}
    return counts


def test_stream_replay_is_deduplicated(spark, standalone, tmp_path):
    _admin(standalone, "PUT", "/namespaces/public/sink-dedup")
    _admin(standalone, "POST", "/namespaces/public/sink-dedup/deduplication", True)
    target = "persistent://public/sink-dedup/copy"
    _admin(standalone, "PUT", "/persistent/public/sink-dedup/copy/partitions", 2)
    expected, replayed = _copy_twice(spark, standalone, "persistent://public/default/sink-src-dedup", target,
                                     tmp_path / "checkpoint")
    assert replayed > 0
    assert _values(spark, standalone, target) == expected  # every source record exactly once


def test_stream_replay_without_dedup_is_at_least_once(spark, standalone, tmp_path):
    _admin(standalone, "PUT", "/namespaces/public/sink-plain")
    _admin(standalone, "POST", "/namespaces/public/sink-plain/deduplication", False)
    target = "persistent://public/sink-plain/copy"
    expected, replayed = _copy_twice(spark, standalone, "persistent://public/default/sink-src-plain", target,
                                     tmp_path / "checkpoint")
    got = _values(spark, standalone, target)
    assert set(got) == set(expected)  # nothing lost
    assert sum(got.values()) == len(expected) + replayed  # the replayed batch is there twice
