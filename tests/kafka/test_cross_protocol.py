"""Kafka clients and the official Pulsar client on the same topics (one offset space)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

pulsar = pytest.importorskip("pulsar")


@pytest.fixture
def pulsar_client(broker):
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=10, io_threads=1,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield client
    client.close()


def test_kafka_to_pulsar(broker, topic, pulsar_client):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "compression.type": "zstd"})
    for i in range(20):
        producer.produce(topic, key=b"key-%d" % i, value=b"value-%d" % i, headers=[("h", b"%d" % i)],
                         timestamp=1_700_000_000_000 + i)
    producer.produce(topic, key=b"\xff\xfe", value=None)  # non-UTF-8 key, tombstone
    assert producer.flush(20) == 0
    consumer = pulsar_client.subscribe(f"persistent://public/default/{topic}", "sub",
                                       initial_position=pulsar.InitialPosition.Earliest)
    msgs = [consumer.receive(timeout_millis=10000) for _ in range(21)]
    for i, msg in enumerate(msgs[:20]):
        assert msg.partition_key() == f"key-{i}"
        assert msg.data() == b"value-%d" % i
        assert msg.properties() == {"h": str(i)}
        assert msg.event_timestamp() == 1_700_000_000_000 + i
        mid = msg.message_id()
        assert mid.entry_id() + max(mid.batch_index(), 0) == i  # the Kafka offset
        consumer.acknowledge(msg)
    assert msgs[20].data() == b""
    consumer.close()


def test_pulsar_to_kafka(broker, topic, pulsar_client):
    producer = pulsar_client.create_producer(f"persistent://public/default/{topic}", batching_enabled=True,
                                             batching_max_publish_delay_ms=20)
    ids = []
    for i in range(10):
        producer.send_async(b"p-%d" % i, lambda res, mid: ids.append(mid), partition_key=f"pk-{i}",
                            properties={"a": str(i)}, event_timestamp=1_600_000_000_000 + i)
    producer.flush()
    producer.send(b"single", partition_key="solo", event_timestamp=1_600_000_000_100)
    producer.close()
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 11 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg)
    consumer.close()
    assert [m.offset() for m in got] == list(range(11))
    for i, msg in enumerate(got[:10]):
        assert (msg.key(), msg.value(), msg.headers()) == (b"pk-%d" % i, b"p-%d" % i, [("a", str(i).encode())])
        assert msg.timestamp()[1] == 1_600_000_000_000 + i
    assert sorted(mid.entry_id() + max(mid.batch_index(), 0) for mid in ids) == list(range(10))
    assert (got[10].key(), got[10].value()) == (b"solo", b"single")
