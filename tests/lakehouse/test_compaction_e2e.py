"""Compaction and SBT tables against a real standalone, with a local Spark session.

Pulsar and Kafka clients read the same records (ids, keys, values, properties /
headers, timestamps) before and after compaction, also while producers and
consumers run during it; every committed record appears exactly once in the
topic's Iceberg table (pyiceberg and Spark); a compaction job killed at random
moments leaves the streams intact and a re-run finishes the work.
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import threading
import time

import pytest

pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("pyiceberg")

from nereus.lakehouse import compaction, sbt  # noqa: E402
from nereus.meta import connect  # noqa: E402
from nereus.storage import records  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402

PULSAR_TOPIC = "persistent://public/default/compact-pulsar"
KAFKA_TOPIC = "compact-kafka"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    node = Standalone(tmp_path_factory.mktemp("compaction") / "data",
                      ["--compaction-interval", "0", "--gc-interval", "0.5", "--gc-grace", "1",
                       "--gc-pending-timeout", "20"])
    node.start()
    yield node
    node.stop()


@pytest.fixture(scope="module")
def urls(node):
    return f"oxia://127.0.0.1:{node.ports['oxia']}", (node.data_dir / "objects").resolve().as_uri()


@pytest.fixture(scope="module")
def catalog(tmp_path_factory, urls):
    path = tmp_path_factory.mktemp("iceberg") / "catalog.db"
    return sbt.open_catalog(f"sqlite:///{path}", urls[1] + "/iceberg")


def produce_pulsar(node, count: int, start: int = 0, topic: str = PULSAR_TOPIC) -> dict:
    """message id -> (key, value, properties, event_time) of acked messages (batched and not)."""
    client = pulsar.Client(node.url)
    acked: dict = {}
    try:
        plain = client.create_producer(topic, batching_enabled=False)
        batched = client.create_producer(topic, batching_enabled=True, batching_max_messages=20,
                                         batching_max_publish_delay_ms=5)
        lock = threading.Lock()
        for i in range(start, start + count):
            key, value, props = f"k{i % 4}", b"v-%d-" % i + bytes(i % 50), {"i": str(i)}
            if i % 3 == 0:
                mid = plain.send(value, properties=props, partition_key=key, event_timestamp=1_700_000_000_000 + i)
                acked[str(mid)] = (key, value, props, 1_700_000_000_000 + i)
            else:
                def done(res, mid, k=key, v=value, p=props, t=1_700_000_000_000 + i):
                    assert res == pulsar.Result.Ok
                    with lock:
                        acked[str(mid)] = (k, v, p, t)
                batched.send_async(value, done, properties=props, partition_key=key,
                                   event_timestamp=1_700_000_000_000 + i)
        batched.flush()
        plain.close()
        batched.close()
    finally:
        client.close()
    assert len(acked) == count
    return acked


def consume_pulsar(node, expected: int, topic: str = PULSAR_TOPIC) -> dict:
    client = pulsar.Client(node.url)
    got: dict = {}
    try:
        consumer = client.subscribe(topic, f"check-{time.monotonic_ns()}",
                                    initial_position=pulsar.InitialPosition.Earliest)
        while len(got) < expected:
            msg = consumer.receive(timeout_millis=30_000)  # generous: CI machines are shared
            assert str(msg.message_id()) not in got
            got[str(msg.message_id())] = (msg.partition_key() or None, msg.data(), msg.properties(),
                                          msg.event_timestamp(), msg.publish_timestamp())
            consumer.acknowledge(msg)
        consumer.close()
    finally:
        client.close()
    return got


def produce_kafka(node, count: int, start: int = 0) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        producer.produce(KAFKA_TOPIC, value=b"kv-%d" % i, key=b"kk%d" % (i % 5), headers=[("i", str(i).encode())],
                         timestamp=1_700_000_000_000 + i)
        if i % 10 == 9:
            assert producer.flush(30) == 0  # many small entries: several index groups to compact
    assert producer.flush(30) == 0


def consume_kafka(node) -> list:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"g{time.monotonic_ns()}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([KAFKA_TOPIC])
    out, idle = [], 0
    try:
        while idle < 3:
            msg = consumer.poll(1.0)
            if msg is None:
                idle += 1
                continue
            assert msg.error() is None, msg.error()
            idle = 0
            out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()))
    finally:
        consumer.close()
    return sorted(out)


async def _index_generations(metadata: str, topic: str) -> list[int]:
    from nereus.lakehouse import rows

    meta = connect(metadata)
    try:
        gens = []
        for name, partition, stream in await rows.partitions(meta, topic):
            bounds = await rows.stream_range(meta, name, partition, stream)
            lo, hi = records.index_range(bounds.stream_id)
            async for rec in meta.range_scan(lo, hi, partition_key=records.stream_partition(bounds.stream_id)):
                gens += [e.generation for e in records.decode_group(rec.value)]
        return gens
    finally:
        await meta.close()


def test_consumers_read_the_same_records_after_compaction(spark, node, urls, catalog):
    acked = produce_pulsar(node, 600)
    produce_kafka(node, 400)
    before_pulsar = consume_pulsar(node, 600)
    before_kafka = consume_kafka(node)
    assert {k: v[:4] for k, v in before_pulsar.items()} == acked

    report = compaction.run_job(spark, *urls, topics=[PULSAR_TOPIC, KAFKA_TOPIC], catalog=catalog)
    assert report.compacted >= 2 and report.conflicts == 0
    assert 1 in asyncio.run(_index_generations(urls[0], PULSAR_TOPIC))
    time.sleep(2.5)  # past the GC grace: the replaced WAL objects are deleted now

    assert consume_pulsar(node, 600) == before_pulsar  # ids, keys, values, properties, times
    assert consume_kafka(node) == before_kafka
    # the Spark source reads compacted and WAL ranges alike
    df = (spark.read.format("nereus").option("metadata", urls[0]).option("objects", urls[1])
          .option("topic", PULSAR_TOPIC).load())
    assert df.count() == 600 and df.select("offset").distinct().count() == 600


def test_sbt_table_holds_every_compacted_record_exactly_once(spark, node, urls, catalog):
    table = catalog.load_table(sbt.identifier(PULSAR_TOPIC))
    offsets = sbt.read_offsets(table)
    ((first, end),) = offsets["-1"]
    rows = table.scan().to_arrow()
    assert rows.num_rows == end - first  # one row per record, no duplicates
    assert sorted(rows.column("offset").to_pylist()) == list(range(first, end))
    source = (spark.read.format("nereus").option("metadata", urls[0]).option("objects", urls[1])
              .option("topic", PULSAR_TOPIC).option("endingOffset", str(end)).load())
    expected = {(r.offset, r.key, r.value, tuple(sorted(r.properties.items()))) for r in source.collect()}
    got = {(o, k, v, tuple(sorted(p))) for o, k, v, p in zip(
        rows.column("offset").to_pylist(), rows.column("key").to_pylist(), rows.column("value").to_pylist(),
        rows.column("properties").to_pylist())}
    assert got == expected
    # Spark reads the table's snapshot too
    assert sbt.spark_table(spark, catalog, PULSAR_TOPIC).count() == end - first
    kafka_table = catalog.load_table(sbt.identifier(KAFKA_TOPIC))
    assert set(sbt.read_offsets(kafka_table)) == {"0"}
    # a second sync changes nothing
    report = asyncio.run(_sync(urls, catalog, PULSAR_TOPIC))
    assert (report.added, report.removed) == (0, 0)


async def _sync(urls, catalog, topic):
    meta = connect(urls[0])
    try:
        return await sbt.sync(meta, catalog, urls[1], topic)
    finally:
        await meta.close()


def test_offsets_hold_while_producing_and_consuming_during_compaction(spark, node, urls, catalog):
    topic = "persistent://public/default/compact-live"
    acked = produce_pulsar(node, 300, topic=topic)
    extra: dict = {}
    stop = threading.Event()

    def keep_producing():
        n = 1000
        while not stop.is_set():
            extra.update(produce_pulsar(node, 40, start=n, topic=topic))
            n += 40

    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        for _ in range(2):
            compaction.run_job(spark, *urls, topics=[topic], catalog=catalog)
    finally:
        stop.set()
        producer.join()
    acked.update(extra)
    got = consume_pulsar(node, len(acked), topic=topic)
    assert {k: v[:4] for k, v in got.items()} == acked


def test_killed_compaction_jobs_leave_streams_intact(node, urls, tmp_path):
    topic = "persistent://public/default/compact-kill"
    acked = produce_pulsar(node, 800, topic=topic)
    catalog_uri = f"sqlite:///{tmp_path / 'kill.db'}"
    rng = random.Random(7)
    cmd = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "compact", "--metadata", urls[0],
           "--objects", urls[1], "--topic", topic, "--target-mb", "0.01", "--catalog", catalog_uri, "--no-progress"]
    for _ in range(3):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(4, 12))  # Spark start-up is part of the window
        proc.kill()
        proc.wait()
        got = consume_pulsar(node, len(acked), topic=topic)
        assert {k: v[:4] for k, v in got.items()} == acked
    # A re-run finishes the work: a dead job's lease goes with its metadata session
    # (5 s), its half-finished switch is finished by the collector (pending timeout);
    # until then a run skips what is still held, as the broker's schedule would.
    deadline = time.monotonic() + 90
    runs = []
    while True:
        time.sleep(6)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(done.stdout)
        gens = asyncio.run(_index_generations(urls[0], topic))
        if all(g >= 1 for g in gens[:-1]) or time.monotonic() > deadline:
            break
    assert all(g >= 1 for g in gens[:-1]), (asyncio.run(_index_layout(urls[0], topic)), runs)
    got = consume_pulsar(node, len(acked), topic=topic)
    assert {k: v[:4] for k, v in got.items()} == acked
    table = sbt.open_catalog(catalog_uri, urls[1] + "/iceberg").load_table(sbt.identifier(topic))
    ((first, end),) = sbt.read_offsets(table)["-1"]
    assert first == 0 and end > 600  # all but the tail's pending slices
    assert sorted(table.scan().to_arrow().column("offset").to_pylist()) == list(range(first, end))



async def _start_offset(metadata: str, topic: str) -> int:
    from nereus.lakehouse import rows

    meta = connect(metadata)
    try:
        ((name, partition, stream),) = await rows.partitions(meta, topic)
        return (await rows.stream_range(meta, name, partition, stream)).start
    finally:
        await meta.close()


def test_retention_removes_sbt_data_files_before_gc_deletes_them(spark, node, urls, catalog):
    """Retention trims whole compacted ranges: the next sync deletes them from the table (a
    table delete), unpins them, and only then may the collector delete the objects."""
    from pathlib import Path
    from urllib.parse import unquote

    topic = "persistent://public/sbt-retention/events"
    _admin(node, "PUT", "/namespaces/public/sbt-retention", {})
    client = pulsar.Client(node.url)
    try:
        consumer = client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(120):
            producer.send(b"r-%d" % i)
        report = compaction.run_job(spark, *urls, topics=[topic], catalog=catalog, target_bytes=2000)
        assert report.compacted >= 3
        table = catalog.load_table(sbt.identifier(topic))
        before = {t.file.file_path for t in table.scan().plan_files()}
        for _ in range(70):
            consumer.acknowledge_cumulative(consumer.receive(timeout_millis=10_000))
        _admin(node, "POST", "/namespaces/public/sbt-retention/retention",
               {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
        deadline = time.monotonic() + 15
        while asyncio.run(_start_offset(urls[0], topic)) < 60 and time.monotonic() < deadline:
            _admin(node, "POST", "/persistent/public/sbt-retention/events/trim")
            time.sleep(0.2)
        start = asyncio.run(_start_offset(urls[0], topic))
        assert start >= 60
        producer.close()
        consumer.close()
    finally:
        client.close()
    time.sleep(2.5)  # several GC passes past the grace period: the pins keep the listed files
    assert all(Path(unquote(p.removeprefix("file://"))).exists() for p in before)
    report = asyncio.run(_sync(urls, catalog, topic))
    assert report.removed >= 1
    table = catalog.load_table(sbt.identifier(topic))
    after = {t.file.file_path for t in table.scan().plan_files()}
    assert after < before
    assert "overwrite" in {s.summary.operation.value for s in table.snapshots()}
    offsets = table.scan().to_arrow().column("offset").to_pylist()
    ((first, end),) = sbt.read_offsets(table)["-1"]
    assert sorted(offsets) == list(range(first, end)) and first <= start < end <= 120
    deadline = time.monotonic() + 10
    while any(Path(unquote(p.removeprefix("file://"))).exists() for p in before - after):
        assert time.monotonic() < deadline, "unpinned objects were not collected"
        time.sleep(0.5)
    assert all(Path(unquote(p.removeprefix("file://"))).exists() for p in after)




async def _index_layout(metadata: str, topic: str) -> list:
    """(generation, first, last) of every index group, and the pending markers: for failure messages."""
    from nereus.lakehouse import rows

    meta = connect(metadata)
    try:
        ((name, partition, stream),) = await rows.partitions(meta, topic)
        bounds = await rows.stream_range(meta, name, partition, stream)
        lo, hi = records.index_range(bounds.stream_id)
        groups = [[(e.generation, e.base, e.last) for e in records.decode_group(rec.value)]
                  async for rec in meta.range_scan(lo, hi, partition_key=records.stream_partition(bounds.stream_id))]
        uncompacted = [(i, g[0][1], g[-1][2], len(g)) for i, g in enumerate(groups) if g[0][0] == 0]
        tail = await meta.get(records.tail_key(bounds.stream_id), partition_key=records.stream_partition(bounds.stream_id))
        pending = [e.base for e in records.Tail.decode(tail.value).pending]
        markers = [r.key async for r in meta.range_scan("/nereus/gc/pending/", "/nereus/gc/pending/\U0010ffff")]
        return {"groups": len(groups), "uncompacted (index, first, last, slices)": uncompacted,
                "tail.pending bases": pending, "markers": markers}
    finally:
        await meta.close()
