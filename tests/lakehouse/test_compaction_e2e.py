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

import pyarrow.parquet as pq
import pytest

pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("pyiceberg")

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from nereus.lakehouse import compaction, sbt, table_format  # noqa: E402
from nereus.lakehouse.spark import SCHEMA  # noqa: E402
from nereus.lakehouse.streaming import NereusStreamReader  # noqa: E402
from nereus.meta import connect  # noqa: E402
from nereus.storage import collector, records  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402

PULSAR_TOPIC = "persistent://public/default/compact-pulsar"
KAFKA_TOPIC = "compact-kafka"
#: Bounds a hang only; every wait ends as soon as its condition holds (loaded 2-core machines
#: need tens of seconds to start Spark or to let a collector pass come round).
DEADLINE = 180.0


def wait_until(condition, what: str, deadline: float = DEADLINE):
    """Poll ``condition`` until it returns something true (and return that)."""
    end = time.monotonic() + deadline
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < end, f"{what}: not within {deadline:.0f} s"
        time.sleep(0.2)


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
            msg = consumer.receive(timeout_millis=int(DEADLINE * 1000))  # bounds a hang only
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
            assert producer.flush(DEADLINE) == 0  # many small entries: several index groups to compact
    assert producer.flush(DEADLINE) == 0


def consume_kafka(node) -> list:
    """Every record of the topic, up to each partition's high watermark (read before consuming)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"g{time.monotonic_ns()}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        topic = consumer.list_topics(KAFKA_TOPIC, timeout=DEADLINE).topics[KAFKA_TOPIC]
        ends = {p: consumer.get_watermark_offsets(confluent_kafka.TopicPartition(KAFKA_TOPIC, p),
                                                  timeout=DEADLINE)[1] for p in topic.partitions}
        consumer.assign([confluent_kafka.TopicPartition(KAFKA_TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in ends])
        out = []
        deadline = time.monotonic() + DEADLINE
        positions = {p: 0 for p in ends}
        while any(positions[p] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"consumed up to {positions}, not {ends}"
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            positions[msg.partition()] = msg.offset() + 1
            if msg.offset() < ends[msg.partition()]:
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()))
    finally:
        consumer.close()
    assert len(out) == len(set(o[:2] for o in out)), "a record was read twice"
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

    # local_bytes=0: in Spark executors, however small the work (other tests take the in-process path)
    report = compaction.run_job(spark, *urls, topics=[PULSAR_TOPIC, KAFKA_TOPIC], catalog=catalog, local_bytes=0)
    assert report.compacted >= 2 and report.conflicts == 0
    assert 1 in asyncio.run(_index_generations(urls[0], PULSAR_TOPIC))
    # the WAL objects the switches released are deleted: consumers can only read the compacted ones
    wait_until(lambda: not asyncio.run(_unpinned_free_objects(urls[0])), "the collector deletes freed objects")

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
    # The schema shows the records; the entry columns stay in the (unrewritten) objects.
    assert [f.name for f in table.schema().fields] == list(table_format.RECORD_COLUMNS) == rows.column_names
    objects = {sbt.object_url(urls[1], o.key) for o in asyncio.run(_compacted_objects(urls[0], PULSAR_TOPIC))}
    files = [task.file for task in table.scan().plan_files()]
    assert {f.file_path for f in files} == objects
    for f in files:
        assert set(table_format.ENTRY_COLUMNS) <= set(pq.read_schema(_local(f.file_path)).names)
        assert f.lower_bounds and f.upper_bounds  # record column statistics, for pruning
    assert sorted(rows.column("offset").to_pylist()) == list(range(first, end))
    source = (spark.read.format("nereus").option("metadata", urls[0]).option("objects", urls[1])
              .option("topic", PULSAR_TOPIC).option("endingOffset", str(end)).load())
    expected = {(r.offset, r.key, r.value, tuple(sorted(r.properties.items()))) for r in source.collect()}
    got = {(o, k, v, tuple(sorted(p))) for o, k, v, p in zip(
        rows.column("offset").to_pylist(), rows.column("key").to_pylist(), rows.column("value").to_pylist(),
        rows.column("properties").to_pylist())}
    assert got == expected
    # Spark reads the table's snapshot too, the same records
    table_rows = sbt.spark_table(spark, catalog, PULSAR_TOPIC)
    assert table_rows.columns == list(table_format.RECORD_COLUMNS)
    assert {(r.offset, r.key, r.value, tuple(sorted(r.properties.items()))) for r in table_rows.collect()} == expected
    kafka_table = catalog.load_table(sbt.identifier(KAFKA_TOPIC))
    assert set(sbt.read_offsets(kafka_table)) == {"0"}
    # a second sync changes nothing
    report = asyncio.run(_sync(urls, catalog, PULSAR_TOPIC))
    assert (report.added, report.removed) == (0, 0)


def _local(url: str) -> str:
    from urllib.parse import unquote

    return unquote(url.removeprefix("file://"))


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


@pytest.mark.timeout(900)  # three Spark jobs and a re-run on a loaded machine; the waits bound hangs
def test_killed_compaction_jobs_leave_streams_intact(node, urls, tmp_path):
    topic = "persistent://public/default/compact-kill"
    acked = produce_pulsar(node, 800, topic=topic)
    catalog_uri = f"sqlite:///{tmp_path / 'kill.db'}"
    rng = random.Random(7)
    cmd = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "compact", "--metadata", urls[0],
           "--objects", urls[1], "--topic", topic, "--target-mb", "0.01", "--catalog", catalog_uri, "--no-progress"]
    owners: set[str] = set()
    for _ in range(3):
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Killed while it compacts: once it holds the stream's lease (it has planned), at a random
        # moment of the next seconds, whatever the machine's speed.
        holder = wait_until(lambda: _new_lease_owner(urls[0], topic, owners) or proc.poll() is not None,
                            "the job takes the stream's compaction lease")
        if isinstance(holder, str):
            owners.add(holder)
        time.sleep(rng.uniform(0, 4))
        proc.kill()
        proc.wait()
        got = consume_pulsar(node, len(acked), topic=topic)
        assert {k: v[:4] for k, v in got.items()} == acked
    # A re-run finishes the work once the dead jobs' leases are gone with their metadata
    # sessions (5 s), the collector has finished or undone their half-done switches (pending
    # timeout), and the stream's owner has grouped its newest slices (the stream is quiet).
    wait_until(lambda: asyncio.run(_settled(urls[0], topic)), "the dead jobs' work is resolved")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    gens = asyncio.run(_index_generations(urls[0], topic))
    assert all(g >= 1 for g in gens), (asyncio.run(_index_layout(urls[0], topic)), done.stdout)
    got = consume_pulsar(node, len(acked), topic=topic)
    assert {k: v[:4] for k, v in got.items()} == acked
    table = sbt.open_catalog(catalog_uri, urls[1] + "/iceberg").load_table(sbt.identifier(topic))
    assert sbt.read_offsets(table)["-1"] == [[0, 800]]
    assert sorted(table.scan().to_arrow().column("offset").to_pylist()) == list(range(800))


async def _stream(meta, topic: str) -> tuple[int, str]:
    """(stream id, partition key) of a non-partitioned topic."""
    from nereus.lakehouse import rows

    ((name, partition, stream),) = await rows.partitions(meta, topic)
    stream_id = (await rows.stream_range(meta, name, partition, stream)).stream_id
    return stream_id, records.stream_partition(stream_id)


def _new_lease_owner(metadata: str, topic: str, seen: set[str]) -> str | None:
    """The owner of the stream's compaction lease, if it is held by a job not in ``seen``."""

    async def read():
        meta = connect(metadata)
        try:
            stream_id, part = await _stream(meta, topic)
            rec = await meta.get(records.compaction_lease_key(stream_id), partition_key=part)
            return None if rec is None else records.decode(rec.value)["owner"]
        finally:
            await meta.close()

    owner = asyncio.run(read())
    return owner if owner is not None and owner not in seen else None


async def _settled(metadata: str, topic: str) -> bool:
    """No compaction lease, no unfinished compaction of the stream, nothing in ``tail.pending``."""
    meta = connect(metadata)
    try:
        stream_id, part = await _stream(meta, topic)
        if await meta.get(records.compaction_lease_key(stream_id), partition_key=part) is not None:
            return False
        async for marker in meta.range_scan(records.GC_PENDING_ROOT + "/", records.GC_PENDING_ROOT + "/\U0010ffff"):
            value = records.decode(marker.value)
            if value.get("kind") == "compaction" and value.get("stream") == stream_id:
                return False
        tail = await meta.get(records.tail_key(stream_id), partition_key=part)
        return not records.Tail.decode(tail.value).pending
    finally:
        await meta.close()


async def _unpinned_free_objects(metadata: str) -> list[str]:
    """Objects released for good and not pinned: the collector deletes them after its grace period."""
    meta = connect(metadata)
    try:
        out = []
        async for marker in meta.range_scan(records.GC_FREE_ROOT + "/", records.GC_FREE_ROOT + "/\U0010ffff"):
            key = records.object_from_marker(marker.key)
            lo, hi = records.pins_range(key)
            if not [pin async for pin in meta.list(lo, hi)]:
                out.append(key)
        return out
    finally:
        await meta.close()


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
        listed = {o.key for o in asyncio.run(_compacted_objects(urls[0], topic))}
        assert {sbt.object_url(urls[1], key) for key in listed} == before
        for _ in range(70):
            consumer.acknowledge_cumulative(consumer.receive(timeout_millis=int(DEADLINE * 1000)))
        _admin(node, "POST", "/namespaces/public/sbt-retention/retention",
               {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})

        def trimmed() -> int:
            _admin(node, "POST", "/persistent/public/sbt-retention/events/trim")
            start = asyncio.run(_start_offset(urls[0], topic))
            return start if start >= 60 else 0

        start = wait_until(trimmed, "retention trims the acknowledged records")
        producer.close()
        consumer.close()
    finally:
        client.close()
    # The trimmed objects are released, and pinned by the table that still lists them: a
    # collector pass that saw them past the grace period must have kept them.
    released = listed - {o.key for o in asyncio.run(_compacted_objects(urls[0], topic))}
    assert released
    wait_for_collector_pass(urls[0], node.data_dir / "objects", released, grace_seconds=1)
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
    wait_until(lambda: not any(Path(unquote(p.removeprefix("file://"))).exists() for p in before - after),
               "the collector deletes the unpinned objects")
    assert all(Path(unquote(p.removeprefix("file://"))).exists() for p in after)


async def _compacted_objects(metadata: str, topic: str) -> list:
    meta = connect(metadata)
    try:
        return await sbt.compacted_objects(meta, topic)
    finally:
        await meta.close()


async def _collector_view(metadata: str, keys: set[str]) -> tuple[dict[str, int], int, int]:
    """(free marker time of each key that has one, clock version, clock time) of the collector."""
    meta = connect(metadata)
    try:
        markers = {}
        for key in keys:
            rec = await meta.get(records.gc_free_key(key))
            if rec is not None:
                markers[key] = rec.version.modified_timestamp
        clock = await meta.get(collector.CLOCK_KEY)
        return markers, (clock.version.version_id if clock else -1), (clock.version.modified_timestamp if clock else 0)
    finally:
        await meta.close()


def wait_for_collector_pass(metadata: str, objects_dir, keys: set[str], grace_seconds: float) -> None:
    """Return once a collector pass that found every free marker of ``keys`` past its grace
    period has finished (or once one of the objects is gone: the caller's check fails).

    Each pass starts by writing the collector's clock record (its metadata-plane time),
    and passes run one after the other."""

    def past_grace():
        markers, version, now = asyncio.run(_collector_view(metadata, keys))
        if any(not (objects_dir / key).exists() for key in keys):
            return ("deleted",)
        if set(markers) != keys:
            return None  # a release has not landed yet
        return ("seen", version) if now >= max(markers.values()) + grace_seconds * 1000 else None

    state = wait_until(past_grace, "a collector pass past the grace period")
    if state[0] == "seen":
        wait_until(lambda: asyncio.run(_collector_view(metadata, set()))[1] > state[1], "that collector pass ends")


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


TXN_TOPIC = "compact-txn"


async def _pending_slices(metadata: str, topic: str) -> int:
    from nereus.lakehouse import rows

    meta = connect(metadata)
    try:
        total = 0
        for name, partition, stream in await rows.partitions(meta, topic):
            bounds = await rows.stream_range(meta, name, partition, stream)
            rec = await meta.get(records.tail_key(bounds.stream_id),
                                 partition_key=records.stream_partition(bounds.stream_id))
            total += len(records.Tail.decode(rec.value).pending)
        return total
    finally:
        await meta.close()


async def _txn_index(metadata: str, topic: str):
    """The transaction index of a one-partition topic's stream."""
    from nereus.lakehouse import rows
    from nereus.transactions.stream_index import read_index

    meta = connect(metadata)
    try:
        ((name, partition, stream),) = await rows.partitions(meta, topic)
        bounds = await rows.stream_range(meta, name, partition, stream)
        return await read_index(meta, bounds.stream_id)
    finally:
        await meta.close()


def _open_transactions(metadata: str, topic: str) -> int:
    """Open transactions of the topic (an ended one stays open until its markers are in)."""
    return len(asyncio.run(_txn_index(metadata, topic)).open)


def _spark_values(spark, urls, topic: str) -> dict[bytes, int]:
    df = (spark.read.format("nereus").option("metadata", urls[0]).option("objects", urls[1])
          .option("topic", topic).load())
    rows = df.select("offset", "value").collect()
    assert len(rows) == len({r.value for r in rows}), "a record was read twice"
    return {r.value: r.offset for r in rows}


def _read_committed(node, topic: str, expected: int) -> dict[bytes, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"g{time.monotonic_ns()}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + DEADLINE
    try:
        while len(got) < expected:
            assert time.monotonic() < deadline, f"read {len(got)} of {expected} committed records"
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got[msg.value()] = msg.offset()
    finally:
        consumer.close()
    return got


def test_transactions_spark_reads_and_sbt_tables_hold_committed_records_only(spark, node, urls, catalog):
    admin_client = AdminClient({"bootstrap.servers": node.bootstrap})
    for fut in admin_client.create_topics([NewTopic(TXN_TOPIC, 1)]).values():
        fut.result(DEADLINE)
    producer = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap, "transactional.id": "lake-txn",
                                         "transaction.timeout.ms": 60000, "linger.ms": 5})
    producer.init_transactions(DEADLINE)
    committed, aborted = set(), set()
    for t in range(6):
        producer.begin_transaction()
        values = {b"t%d-%d" % (t, i) for i in range(5)}
        for value in sorted(values):
            producer.produce(TXN_TOPIC, value=value, key=value[:2])
        if t % 2 == 0:
            producer.commit_transaction(DEADLINE)
            committed |= values
        else:
            producer.flush(DEADLINE)  # stored before the abort
            producer.abort_transaction(DEADLINE)
            aborted |= values
    producer.begin_transaction()
    pending = {b"open-%d" % i for i in range(3)}
    for value in sorted(pending):
        producer.produce(TXN_TOPIC, value=value)
    assert producer.flush(DEADLINE) == 0
    plain = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap})
    late = {b"late-%d" % i for i in range(3)}
    for value in sorted(late):
        plain.produce(TXN_TOPIC, value=value)
    assert plain.flush(DEADLINE) == 0

    # EndTxn is answered before the markers are in: wait until only the last one is open.
    wait_until(lambda: _open_transactions(urls[0], TXN_TOPIC) == 1, "the markers are written")
    # Open transaction: the read stops at it (the LSO), so the later plain records wait too.
    assert set(_spark_values(spark, urls, TXN_TOPIC)) == committed
    stream = NereusStreamReader({"metadata": urls[0], "objects": urls[1], "topic": TXN_TOPIC}, SCHEMA)
    waiting = stream.latestOffset()
    producer.commit_transaction(DEADLINE)
    committed |= pending | late
    wait_until(lambda: _open_transactions(urls[0], TXN_TOPIC) == 0, "the commit markers are written")
    before = _spark_values(spark, urls, TXN_TOPIC)
    assert set(before) == committed and not aborted & set(before)
    # Structured streaming: the offsets stopped at the open transaction and move on after its commit.
    assert waiting == {"0": before[b"open-0"]}
    assert stream.latestOffset()["0"] > max(before.values())

    wait_until(lambda: asyncio.run(_pending_slices(urls[0], TXN_TOPIC)) == 0, "every slice is in an idx group")
    report = compaction.run_job(spark, *urls, topics=[TXN_TOPIC], catalog=catalog)
    assert report.compacted >= 1 and report.conflicts == 0
    table = catalog.load_table(sbt.identifier(TXN_TOPIC))
    rows = table.scan().to_arrow()
    assert dict(zip(rows.column("value").to_pylist(), rows.column("offset").to_pylist())) == before
    # Consumers of the compacted range: the same records at the same offsets.
    assert _read_committed(node, TXN_TOPIC, len(committed)) == before
    got = consume_pulsar(node, len(committed), topic=f"persistent://public/default/{TXN_TOPIC}")
    assert {value for _, value, *_ in got.values()} == committed
    assert _spark_values(spark, urls, TXN_TOPIC) == before
    # Retention: a trim past the aborted transactions forgets their ranges (the broker's trim listener).
    assert len(asyncio.run(_txn_index(urls[0], TXN_TOPIC)).aborted) == 3
    trim = confluent_kafka.TopicPartition(TXN_TOPIC, 0, before[b"open-0"])
    [(_, future)] = admin_client.delete_records([trim], request_timeout=DEADLINE).items()
    assert future.result(DEADLINE).low_watermark == before[b"open-0"]
    assert asyncio.run(_txn_index(urls[0], TXN_TOPIC)).aborted == ()


def test_the_scheduled_job_repairs_a_table_dropped_by_hand(spark, node, urls, catalog):
    """The worker's runs (no topic list) check every table there is or should be: a table
    dropped by hand comes back with the same data files, found from the pins it left."""
    before = {t.file.file_path for t in catalog.load_table(sbt.identifier(KAFKA_TOPIC)).scan().plan_files()}
    assert before
    catalog.drop_table(sbt.identifier(KAFKA_TOPIC))
    report = compaction.run_job(spark, *urls, catalog=catalog)
    repaired = [t for t in report.tables if t.table == ".".join(sbt.identifier(KAFKA_TOPIC))]
    assert len(repaired) == 1 and repaired[0].created and repaired[0].stale
    after = {t.file.file_path for t in catalog.load_table(sbt.identifier(KAFKA_TOPIC)).scan().plan_files()}
    assert after >= before
