"""Fetch errors: an error partition carries an empty record set, and clients reset on OFFSET_OUT_OF_RANGE."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.standalone_process import admin

from .conftest import wait_until
from .raw import RawKafka

OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION = 1, 3


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(20) == 0


def _consumer(bootstrap: str, reset: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"reset-{time.monotonic_ns()}",
                     "auto.offset.reset": reset, "enable.auto.commit": False, "fetch.wait.max.ms": 100})


def _first_message(consumer: Consumer, timeout: float = 20.0, between=None):
    """The first record the consumer delivers (``between`` runs before every poll)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if between is not None:
            between()
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            return msg
    raise AssertionError("the consumer delivered nothing: it never reset its offset")


@pytest.mark.parametrize("version", [4, 11, 12])
def test_error_partitions_carry_an_empty_record_set(broker, topic, version):
    raw = RawKafka(broker.bootstrap)
    assert raw.metadata([topic]).topics[0].error_code == 0
    _produce(broker.bootstrap, topic, [b"a", b"b", b"c"])
    beyond = raw.fetch(topic, 0, 100, version=version)
    assert beyond.error_code == OFFSET_OUT_OF_RANGE and beyond.high_watermark == 3
    assert beyond.records is not None and len(beyond.records) == 0
    unknown = raw.fetch(topic, 7, 0, version=version)
    assert unknown.error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert unknown.records is not None and len(unknown.records) == 0
    ok = raw.fetch(topic, 0, 0, version=version)
    assert ok.error_code == 0 and len(ok.records) > 0
    raw.close()


def test_offset_beyond_the_end_resets_to_earliest(broker, topic):
    _produce(broker.bootstrap, topic, [b"m%d" % i for i in range(5)])
    consumer = _consumer(broker.bootstrap, "earliest")
    consumer.assign([TopicPartition(topic, 0, 1000)])
    msg = _first_message(consumer)
    assert (msg.offset(), msg.value()) == (0, b"m0")
    consumer.close()


def test_offset_beyond_the_end_resets_to_latest(broker, topic):
    _produce(broker.bootstrap, topic, [b"old%d" % i for i in range(5)])
    consumer = _consumer(broker.bootstrap, "latest")
    consumer.assign([TopicPartition(topic, 0, 1000)])
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    sent = iter(range(1000))
    # Keep producing until the consumer, once reset to the end, sees a new record.
    msg = _first_message(consumer, between=lambda: (producer.produce(topic, value=b"new%d" % next(sent)),
                                                    producer.flush(10)))
    assert msg.offset() >= 5 and msg.value().startswith(b"new")
    consumer.close()


def test_offset_below_the_start_resets_to_earliest(fresh_broker, topic):
    fresh_broker.start()
    for i in range(6):  # separate produce requests: several entries
        _produce(fresh_broker.bootstrap, topic, [b"gone%d" % i])
    # Retention that keeps nothing acknowledged; a topic without subscriptions counts as acknowledged.
    admin(fresh_broker, "POST", "/namespaces/public/default/retention",
          {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
    probe = _consumer(fresh_broker.bootstrap, "earliest")
    low = wait_until(lambda: probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0], timeout=30)
    probe.close()
    assert low > 0
    raw = RawKafka(fresh_broker.bootstrap)
    below = raw.fetch(topic, 0, 0)
    assert below.error_code == OFFSET_OUT_OF_RANGE and below.log_start_offset == low and len(below.records) == 0
    raw.close()
    consumer = _consumer(fresh_broker.bootstrap, "earliest")
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer({"bootstrap.servers": fresh_broker.bootstrap, "linger.ms": 0})
    producer.produce(topic, value=b"kept")
    assert producer.flush(10) == 0
    msg = _first_message(consumer)
    assert msg.offset() >= low and msg.value() in (b"kept", *(b"gone%d" % i for i in range(low, 6)))
    consumer.close()
