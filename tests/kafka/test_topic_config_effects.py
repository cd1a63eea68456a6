"""Topic configs take effect: max.message.bytes, message.timestamp.type, retention.ms / retention.bytes."""

from __future__ import annotations

import time

from confluent_kafka import (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, KafkaError, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kafka import KafkaConsumer

from .conftest import wait_until

TIMEOUT = 20


def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(broker, topic, config, partitions=1):
    client = admin(broker)  # kept until the answer is in
    client.create_topics([NewTopic(topic, partitions, config=config)], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)


def produce(broker, topic, values, **kw):
    """Each value in its own batch; returns the delivery errors (None for delivered)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    errors = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, _msg: errors.append(err), **kw)
        producer.flush(TIMEOUT)
    return errors


def watermarks(broker, topic):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT, cached=False)
    finally:
        consumer.close()


def test_max_message_bytes_refuses_larger_batches(broker, topic):
    create(broker, topic, {"max.message.bytes": "1000"})
    errors = produce(broker, topic, [b"x" * 100, b"y" * 5000])
    assert errors[0] is None
    assert errors[1] is not None and errors[1].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert watermarks(broker, topic) == (0, 1)


def test_log_append_time_stamps_batches(broker, topic):
    create(broker, topic, {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    assert produce(broker, topic, [b"a", b"b"], timestamp=1000) == [None, None]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                seen.append(msg.timestamp())
    finally:
        consumer.close()
    assert len(seen) == 2
    for kind, stamp in seen:
        assert kind == TIMESTAMP_LOG_APPEND_TIME
        assert stamp >= before - 1000  # the broker's clock, not the producer's 1000

    # kafka-python reads the batch attribute too
    reader = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                           consumer_timeout_ms=10_000)
    try:
        records = [r for _, r in zip(range(2), reader)]
    finally:
        reader.close()
    assert [r.timestamp_type for r in records] == [1, 1]
    assert all(r.timestamp >= before - 1000 for r in records)


def test_create_time_is_kept_by_default(broker, topic):
    create(broker, topic, {})
    assert produce(broker, topic, [b"a"], timestamp=1234) == [None]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        msg = wait_until(lambda: (m := consumer.poll(0.5)) is not None and not m.error() and m)
    finally:
        consumer.close()
    assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, 1234)


def test_retention_bytes_and_ms_trim_the_partition(broker, topic):
    create(broker, topic, {"retention.ms": "3600000"})
    assert produce(broker, topic, [b"v%d" % i for i in range(5)]) == [None] * 5
    assert watermarks(broker, topic) == (0, 5)

    def alter(name, value):
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        client = admin(broker)
        client.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)

    alter("retention.bytes", "1")  # keeps at most one byte: every whole slice goes
    assert wait_until(lambda: watermarks(broker, topic)[0] == 5)
    assert produce(broker, topic, [b"later"]) == [None]
    alter("retention.ms", "1")
    assert wait_until(lambda: watermarks(broker, topic) == (6, 6))
