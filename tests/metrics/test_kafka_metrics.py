"""Kafka request metrics and consumer group lag in `/metrics` of a real standalone."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from .conftest import value, wait_until


def test_request_counts_errors_and_latency_move(standalone, topic):
    before = value(standalone, "nereus_kafka_requests_total", api="Produce")
    producer = Producer({"bootstrap.servers": standalone.bootstrap, "linger.ms": 0})
    for _ in range(5):
        producer.produce(topic, value=b"x")
        producer.flush(10)
    assert value(standalone, "nereus_kafka_requests_total", api="Produce") >= before + 5
    assert value(standalone, "nereus_kafka_requests_total", api="Metadata") > 0
    assert value(standalone, "nereus_kafka_request_seconds_count", api="Produce") >= before + 5
    assert value(standalone, "nereus_kafka_request_seconds_bucket", api="Produce", le="+Inf") >= before + 5

    admin = AdminClient({"bootstrap.servers": standalone.bootstrap})
    errors = value(standalone, "nereus_kafka_request_errors_total", api="CreateTopics",
                   error="TOPIC_ALREADY_EXISTS")
    result = admin.create_topics([NewTopic(topic, num_partitions=1)])[topic]
    try:
        result.result(timeout=10)
        raise AssertionError("creating an existing topic succeeded")
    except Exception as exc:  # KafkaException(TOPIC_ALREADY_EXISTS)
        assert "already exists" in str(exc).lower() or "TOPIC_ALREADY_EXISTS" in str(exc)
    assert value(standalone, "nereus_kafka_request_errors_total", api="CreateTopics",
                 error="TOPIC_ALREADY_EXISTS") == errors + 1


def test_lag_of_a_group_with_uncommitted_backlog(standalone, topic, group):
    producer = Producer({"bootstrap.servers": standalone.bootstrap})
    for i in range(10):
        producer.produce(topic, value=b"m-%d" % i)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": standalone.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg)
    consumer.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    consumer.close()

    labels = {"group": group, "topic": topic, "partition": "0"}
    wait_until(lambda: value(standalone, "nereus_kafka_consumer_group_lag", **labels) == 6,
               what="lag 6 for the group")
    assert value(standalone, "nereus_kafka_consumer_group_committed_offset", **labels) == 4

    # kafka-python catches up and commits: the lag falls to zero
    reader = KafkaConsumer(topic, bootstrap_servers=standalone.bootstrap, group_id=group,
                           auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000)
    try:
        seen = 0
        for _ in reader:
            seen += 1
            if seen == 6:
                break
        reader.commit()
    finally:
        reader.close()
    wait_until(lambda: value(standalone, "nereus_kafka_consumer_group_lag", **labels) == 0
               and value(standalone, "nereus_kafka_consumer_group_committed_offset", **labels) == 10,
               what="lag 0 after the group caught up")
