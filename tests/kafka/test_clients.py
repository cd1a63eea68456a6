"""Produce/consume, compression, seeking and timestamps with kafka-python, confluent-kafka and aiokafka."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .conftest import wait_until


def _consume_confluent(bootstrap: str, topic: str, n: int, group: str | None = None, **extra) -> list:
    conf = {"bootstrap.servers": bootstrap, "group.id": group or f"read-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra)
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    out = []
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            out.append(msg)
    consumer.close()
    return out


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_produce_consume(broker, topic, codec):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "compression.type": codec, "enable.idempotence": True})
    for i in range(200):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i * 20, headers=[("n", str(i).encode())],
                         timestamp=1_700_000_000_000 + i)
    assert producer.flush(20) == 0
    msgs = _consume_confluent(broker.bootstrap, topic, 200)
    assert [m.offset() for m in msgs] == list(range(200))
    assert [m.key() for m in msgs] == [b"k%d" % i for i in range(200)]
    assert msgs[7].value() == b"v7" * 20 and msgs[7].headers() == [("n", b"7")]
    assert msgs[7].timestamp()[1] == 1_700_000_000_007


def test_kafka_python_produce_consume_and_seek(broker, topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True,
                             compression_type="gzip")
    for i in range(50):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"x")])
    producer.flush(20)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    tp = KTP(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [m for _, m in zip(range(50), consumer)]
    assert [m.offset for m in got] == list(range(50)) and got[3].headers == [("h", b"x")]
    consumer.seek(tp, 42)
    assert next(consumer).value == b"v42"
    assert consumer.end_offsets([tp])[tp] == 50 and consumer.beginning_offsets([tp])[tp] == 0
    consumer.close()


def test_aiokafka_produce_consume(broker, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True,
                                    compression_type="lz4")
        await producer.start()
        try:
            batch = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(30)]
            results = [await f for f in await asyncio.gather(*batch)]
        finally:
            await producer.stop()
        assert sorted(r.offset for r in results) == list(range(30))
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = ATP(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 10)
            got = []
            while len(got) < 20:
                got.append(await asyncio.wait_for(consumer.getone(), 10))
            assert [m.offset for m in got] == list(range(10, 30)) and got[0].value == b"v10"
        finally:
            await consumer.stop()

    asyncio.run(run())


def test_offsets_for_times_and_long_poll(broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, timestamp=1_000_000 + i * 1000)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "times", "fetch.wait.max.ms": 2000})
    found = consumer.offsets_for_times([TopicPartition(topic, 0, 1_004_500)], timeout=10)
    assert found[0].offset == 5
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    assert (low, high) == (0, 10)
    consumer.assign([TopicPartition(topic, 0, 10)])
    assert consumer.poll(1.0) is None  # nothing yet: the long poll waits
    producer.produce(topic, value=b"late")
    producer.flush(10)
    msg = wait_until(lambda: consumer.poll(0.5), timeout=15)
    assert msg.value() == b"late" and msg.offset() == 10
    consumer.close()


def test_pipelined_produce_does_not_stall(broker, topic):
    # Many requests in flight on one connection: reading pauses and must resume as responses drain.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                         "batch.size": 64 * 1024})
    start = time.monotonic()
    for _ in range(30_000):
        producer.produce(topic, b"x" * 1024)
    assert producer.flush(60) == 0
    assert time.monotonic() - start < 30
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stall"})
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 30_000)
    consumer.close()
