"""Filter pushdown and startingTimestamp of the ``nereus`` source, against a real standalone.

A 2-partition topic gets an "old" batch of messages, which is compacted, then a "new"
batch left in the WAL. Pruning is checked on what the reader plans (the input
partitions, i.e. the offsets tasks will read), and on Spark's scan of the same query.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone

import pytest

pyspark = pytest.importorskip("pyspark")
pulsar = pytest.importorskip("pulsar")

from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan  # noqa: E402

from nereus.lakehouse import compaction, pruning  # noqa: E402
from nereus.lakehouse.read_tasks import NereusRange  # noqa: E402
from nereus.lakehouse.spark import SCHEMA, NereusPushdownReader  # noqa: E402
from nereus.meta import connect  # noqa: E402
from nereus.objstore import open_object_store  # noqa: E402
from nereus.storage import view  # noqa: E402
from tests.standalone_process import Standalone, admin  # noqa: E402

TOPIC = "persistent://public/default/pushdown"
OLD, NEW = 120, 80
CHUNK = 10


def _urls(node: Standalone) -> tuple[str, str]:
    return f"oxia://127.0.0.1:{node.ports['oxia']}", (node.data_dir / "objects").resolve().as_uri()


def _produce(node: Standalone, prefix: str, count: int) -> None:
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(count):
            producer.send(f"{prefix}-{i}".encode(), partition_key=f"k{i}")
        producer.close()
    finally:
        client.close()


@pytest.fixture(scope="module")
def topic(spark, standalone):
    """(cut in ms, {partition: (first new offset, end)}): old records compacted, new ones in the WAL."""
    admin(standalone, "PUT", "/persistent/public/default/pushdown/partitions", 2)
    _produce(standalone, "old", OLD)
    cut = int(time.time() * 1000) + 1
    while time.time() * 1000 <= cut:  # every new record is published after the cut
        time.sleep(0.001)
    report = compaction.run_job(spark, *_urls(standalone), topics=[TOPIC])
    assert report.compacted >= 2
    _produce(standalone, "new", NEW)
    return cut, asyncio.run(_new_ranges(_urls(standalone)[0]))


async def _new_ranges(metadata: str) -> dict[int, tuple[int, int]]:
    """Per partition: (end of the compacted objects, committed end)."""
    meta = connect(metadata)
    try:
        out = {}
        for partition in (0, 1):
            sid = await view.stream_id(meta, f"{TOPIC}-partition-{partition}")
            compacted_end = 0
            async for entry in view.indexed_entries(meta, sid):
                if entry.generation > 0:
                    compacted_end = max(compacted_end, entry.last + 1)
            out[partition] = (compacted_end, (await view.bounds(meta, sid))[1])
        return out
    finally:
        await meta.close()


def _options(node: Standalone, **extra: str) -> dict[str, str]:
    metadata, objects = _urls(node)
    return {"metadata": metadata, "objects": objects, "topic": TOPIC, "recordsPerPartition": str(CHUNK), **extra}


def _planned(reader) -> set[tuple[int, int]]:
    """(partition, offset) of every offset the planned tasks read."""
    return {(p.range.partition, o) for p in reader.partitions() if isinstance(p, NereusRange)
            for o in range(p.range.start, p.range.end)}


def _source(spark, node: Standalone, **extra: str):
    reader = spark.read.format("nereus")
    for key, value in _options(node, **extra).items():
        reader = reader.option(key, value)
    return reader.load()


def test_partition_and_offset_filters_are_applied_when_planning(standalone, topic):
    _, ranges = topic
    assert all(first > 0 for first, _ in ranges.values())  # some records of both partitions compacted
    reader = NereusPushdownReader(_options(standalone), SCHEMA)
    filters = [EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), 10), LessThan(("offset",), 30),
               In(("value",), (b"x",))]
    assert list(reader.pushFilters(filters)) == filters[3:]  # exact: Spark need not apply them again
    assert _planned(reader) == {(1, o) for o in range(10, 30)}


def test_time_filters_skip_compacted_objects_outside_the_range(standalone, topic):
    cut, ranges = topic
    after = GreaterThanOrEqual(("publish_time",), datetime.fromtimestamp(cut / 1000, timezone.utc))
    reader = NereusPushdownReader(_options(standalone), SCHEMA)
    assert list(reader.pushFilters([after])) == [after]  # objects skipped; Spark still filters the rows
    assert _planned(reader) == {(p, o) for p, (first, end) in ranges.items() for o in range(first, end)}
    before = LessThan(("publish_time",), datetime.fromtimestamp(cut / 1000, timezone.utc))
    reader = NereusPushdownReader(_options(standalone), SCHEMA)
    reader.pushFilters([before])
    assert _planned(reader) == {(p, o) for p, (_, end) in ranges.items() for o in range(end)}  # WAL kept


def test_compacted_object_statistics_bound_publish_times(standalone, topic):
    cut, _ = topic
    stats = asyncio.run(_object_stats(standalone))
    assert stats and all(high < cut * 1000 for _, high in stats)


async def _object_stats(node: Standalone) -> list[tuple[int, int]]:
    metadata, objects_url = _urls(node)
    meta, objects = connect(metadata), open_object_store(objects_url)
    try:
        out = []
        for partition in (0, 1):
            sid = await view.stream_id(meta, f"{TOPIC}-partition-{partition}")
            async for entry in view.indexed_entries(meta, sid):
                if entry.generation > 0:
                    out.append((await pruning.time_stats(objects, entry.object))["publish_time"])
        return out
    finally:
        await objects.close()
        await meta.close()


def test_spark_pushes_the_filters_and_returns_the_same_rows(spark, standalone, topic):
    cut, ranges = topic
    cut_literal = datetime.fromtimestamp(cut / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    query = f"publish_time >= timestamp'{cut_literal}'"
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    try:
        unpushed = {r.value for r in _source(spark, standalone).where(query).collect()}
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        pushed = _source(spark, standalone).where(query)
        assert {r.value for r in pushed.collect()} == unpushed == {f"new-{i}".encode() for i in range(NEW)}
        # One task per CHUNK offsets, of the new (uncompacted) offsets only
        expected_tasks = sum(-(-(end - first) // CHUNK) for first, end in ranges.values())
        assert pushed.rdd.getNumPartitions() == expected_tasks
        exact = _source(spark, standalone).where("partition = 0 and offset < 5")
        assert sorted(r.offset for r in exact.collect()) == [0, 1, 2, 3, 4]
        assert exact.rdd.getNumPartitions() == 1
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


def test_starting_timestamp_batch_and_streaming(spark, standalone, topic, tmp_path):
    cut, _ = topic
    batch = _source(spark, standalone, startingTimestamp=str(cut))
    assert sorted(r.value for r in batch.collect()) == sorted(f"new-{i}".encode() for i in range(NEW))
    new = {(r.partition, r.offset) for r in _source(spark, standalone).collect() if r.value.startswith(b"new-")}
    assert {(r.partition, r.offset) for r in batch.collect()} == new

    stream = spark.readStream.format("nereus")
    for key, value in _options(standalone, startingTimestamp=str(cut)).items():
        stream = stream.option(key, value)
    query = (stream.load().writeStream.format("memory").queryName("from_timestamp")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    got = sorted(r.value for r in spark.sql("select value from from_timestamp").collect())
    assert got == sorted(f"new-{i}".encode() for i in range(NEW))


@pytest.mark.parametrize("options, message", [
    ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
    ({"startingTimestamp": "1", "startingOffset": "earliest"}, "not both"),
])
def test_bad_starting_timestamp(spark, standalone, options, message):
    with pytest.raises(Exception, match=message):
        _source(spark, standalone, **options).collect()
