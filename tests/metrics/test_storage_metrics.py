"""Storage metrics: flushes, object puts, commits, caches and GC in a real standalone; compaction progress."""

from __future__ import annotations

import asyncio
import urllib.request

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer

from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import StorageOptions, StreamStorage, WalOptions, compacted_format, compaction
from nereus.storage import metrics as storage_metrics

from .conftest import pulsar_name, value, wait_until

pulsar = pytest.importorskip("pulsar")


def test_flush_put_commit_and_cache_series_move(standalone, topic, group):
    before = {name: value(standalone, name, **labels) for name, labels in (
        ("nereus_storage_wal_flush_bytes_count", {}), ("nereus_storage_wal_flush_bytes_sum", {}),
        ("nereus_storage_object_puts_total", {"kind": "wal"}),
        ("nereus_storage_object_put_bytes_total", {"kind": "wal"}),
        ("nereus_storage_commit_seconds_count", {}),
        ("nereus_storage_cache_hits_total", {"cache": "tail"}))}
    producer = Producer({"bootstrap.servers": standalone.bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce(topic, value=b"s" * 1000)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": standalone.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = 0
    for _ in range(60):
        msg = consumer.poll(0.5)
        got += msg is not None and not msg.error()
        if got == 20:
            break
    consumer.close()
    assert got == 20

    assert value(standalone, "nereus_storage_wal_flush_bytes_count") > before["nereus_storage_wal_flush_bytes_count"]
    assert value(standalone, "nereus_storage_wal_flush_bytes_sum") >= before["nereus_storage_wal_flush_bytes_sum"] + 20_000
    puts = value(standalone, "nereus_storage_object_puts_total", kind="wal")
    assert puts > before["nereus_storage_object_puts_total"]
    assert value(standalone, "nereus_storage_object_put_bytes_total", kind="wal") >= (
        before["nereus_storage_object_put_bytes_total"] + 20_000)
    assert value(standalone, "nereus_storage_commit_seconds_count") > before["nereus_storage_commit_seconds_count"]
    # a consumer reading what was just written is served by the tail cache
    assert value(standalone, "nereus_storage_cache_hits_total", cache="tail") > before["nereus_storage_cache_hits_total"]
    samples_text = standalone.metrics()
    for name in ("nereus_storage_cache_misses_total", "nereus_storage_object_put_errors_total",
                 "nereus_storage_gc_reclaimed_bytes_total", "nereus_storage_compaction_ranges_total"):
        assert name in samples_text


def test_gc_counts_what_a_deleted_topic_frees(standalone, topic):
    name = pulsar_name(topic)
    client = pulsar.Client(standalone.pulsar_url, operation_timeout_seconds=10, io_threads=1,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(name, batching_enabled=False)
        for _ in range(10):
            producer.send(b"g" * 2000)
        producer.close()
    finally:
        client.close()
    deleted = value(standalone, "nereus_storage_gc_deleted_objects_total")
    reclaimed = value(standalone, "nereus_storage_gc_reclaimed_bytes_total")
    path = name.replace("persistent://", "persistent/")
    request = urllib.request.Request(f"{standalone.http}/admin/v2/{path}?force=true", method="DELETE")
    with urllib.request.urlopen(request, timeout=15):
        pass
    wait_until(lambda: value(standalone, "nereus_storage_gc_deleted_objects_total") > deleted
               and value(standalone, "nereus_storage_gc_reclaimed_bytes_total") >= reclaimed + 2000,
               what="the collector deleting the topic's objects")


def _encode(stream_id: int, first: int, entries, generation: int) -> bytes:
    columns = compacted_format.entry_columns([[e] for e in entries])
    table = pa.table({"n": pa.array(range(len(entries)), pa.int64()), **columns})
    header = compacted_format.CompactedHeader(stream_id, first, sum(c for c, _ in entries), len(entries), generation)
    return compacted_format.encode(table, header)


async def test_compaction_adds_to_the_progress_that_brokers_serve():
    engine = open_engine(None, shards=2)
    meta = engine.client(namespace="default")
    objects = open_object_store("memory://")
    storage = StreamStorage(meta, objects, node_id="n", options=StorageOptions(wal=WalOptions(flush_interval=0.002)))
    collector = storage_metrics.ProgressCollector(meta, refresh_seconds=0)
    try:
        assert _progress(collector) == {"ranges": 0, "input": 0, "output": 0, "last": 0}
        stream = await storage.open_stream("c", create=True)
        for i in range(24):  # three full index groups of 8 slices
            await stream.append(b"entry-%d" % i * 20, 1)
        puts = _sample("nereus_storage_object_puts_total", kind="compacted")
        jobs = await compaction.plan(meta, stream.stream_id, target_bytes=1)  # one per group
        assert len(jobs) >= 2
        for job in jobs:
            await compaction.compact(meta, objects, storage.reader, job, _encode)
        assert _sample("nereus_storage_object_puts_total", kind="compacted") == puts + len(jobs)

        async def read():
            collector.collect()  # starts a read of the progress record; the next collect shows it
            for _ in range(100):
                await asyncio.sleep(0.01)
                if _progress(collector)["ranges"]:
                    return _progress(collector)
            raise AssertionError("the progress record was not read")

        progress = await read()
        assert progress["ranges"] == len(jobs)
        assert progress["input"] > 16 * 20 and progress["output"] > 0 and progress["last"] > 0
    finally:
        await collector.close()
        await storage.close()
        await meta.close()
        await objects.close()
        await engine.close()


def _progress(collector) -> dict:
    values = {f.name: f.samples[0].value for f in collector.collect()}
    return {"ranges": values["nereus_storage_compaction_ranges"],
            "input": values["nereus_storage_compaction_input_bytes"],
            "output": values["nereus_storage_compaction_output_bytes"],
            "last": values["nereus_storage_compaction_last_run_timestamp_seconds"]}


def _sample(name: str, **labels) -> float:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value(name, labels) or 0.0
