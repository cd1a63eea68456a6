"""Topic metrics and stats count both protocols, and rates show while traffic runs."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer

from .conftest import kafka_stream, pulsar_name, topic_stats, value, wait_until

pulsar = pytest.importorskip("pulsar")


@pytest.fixture
def pulsar_client(standalone):
    client = pulsar.Client(standalone.pulsar_url, operation_timeout_seconds=10, io_threads=1,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield client
    client.close()


def kafka_consume(standalone, topic: str, group: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": standalone.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg)
    finally:
        consumer.close()
    return got


def test_kafka_produced_pulsar_consumed_shows_both_sides(standalone, topic, pulsar_client):
    producer = Producer({"bootstrap.servers": standalone.bootstrap, "linger.ms": 5})
    for i in range(25):
        producer.produce(topic, value=b"v" * 100, key=b"k%d" % i)
    assert producer.flush(20) == 0
    name = pulsar_name(topic)
    consumer = pulsar_client.subscribe(name, "reader", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(25):
        consumer.acknowledge(consumer.receive(timeout_millis=10000))

    stream = kafka_stream(topic)  # Kafka created it: partitioned, one partition
    assert value(standalone, "pulsar_in_messages_total", topic=stream) == 25
    assert value(standalone, "pulsar_in_bytes_total", topic=stream) > 25 * 100
    assert value(standalone, "pulsar_out_messages_total", topic=stream, subscription="reader") == 25
    stats = topic_stats(standalone, stream)
    assert stats["msgInCounter"] == 25 and stats["bytesInCounter"] > 2500
    assert stats["msgOutCounter"] == 25
    assert stats["subscriptions"]["reader"]["msgOutCounter"] == 25
    assert stats["averageMsgSize"] > 100
    total = topic_stats(standalone, name, partitioned=True)
    assert total["msgInCounter"] == 25 and total["msgOutCounter"] == 25
    assert total["subscriptions"]["reader"]["msgOutCounter"] == 25
    consumer.close()


def test_pulsar_produced_kafka_consumed_shows_both_sides(standalone, topic, group, pulsar_client):
    name = pulsar_name(topic)
    producer = pulsar_client.create_producer(name, batching_enabled=False)
    for i in range(12):
        producer.send(b"p-%d" % i)
    assert len(kafka_consume(standalone, topic, group, 12)) == 12

    assert value(standalone, "pulsar_in_messages_total", topic=name) == 12
    # Kafka reads carry no subscription; a topic's sum covers both protocols.
    assert value(standalone, "pulsar_out_messages_total", topic=name, subscription="") >= 12
    stats = topic_stats(standalone, name)
    assert stats["msgInCounter"] == 12
    assert stats["msgOutCounter"] >= 12 and stats["bytesOutCounter"] > 0
    assert stats["publishers"][0]["averageMsgSize"] > 0
    producer.close()


def test_per_producer_and_consumer_rates_while_traffic_runs(standalone, topic, pulsar_client):
    name = pulsar_name(topic)
    consumer = pulsar_client.subscribe(name, "live", consumer_name="c1",
                                       initial_position=pulsar.InitialPosition.Earliest)
    producer = pulsar_client.create_producer(name, producer_name="p1", batching_enabled=False)
    stop = threading.Event()

    def produce():
        while not stop.is_set():
            producer.send(b"x" * 200)
            time.sleep(0.01)

    def consume():
        while not stop.is_set():
            try:
                consumer.acknowledge(consumer.receive(timeout_millis=200))
            except pulsar.Timeout:
                pass

    threads = [threading.Thread(target=produce), threading.Thread(target=consume)]
    for t in threads:
        t.start()
    try:
        def rates_visible():
            stats = topic_stats(standalone, name)
            pub = stats["publishers"][0] if stats["publishers"] else {}
            sub = stats["subscriptions"].get("live", {})
            cons = sub.get("consumers", [{}])[0] if sub.get("consumers") else {}
            ok = (stats["msgRateIn"] > 0 and stats["msgThroughputIn"] > 0 and stats["msgRateOut"] > 0
                  and pub.get("msgRateIn", 0) > 0 and pub.get("msgThroughputIn", 0) > 0
                  and pub.get("averageMsgSize", 0) > 0 and sub.get("msgRateOut", 0) > 0
                  and sub.get("msgThroughputOut", 0) > 0 and cons.get("msgRateOut", 0) > 0
                  and cons.get("msgThroughputOut", 0) > 0)
            return stats if ok else None

        stats = wait_until(rates_visible, what="non-zero producer, subscription and consumer rates")
        assert stats["publishers"][0]["producerName"] == "p1"
        assert stats["subscriptions"]["live"]["consumers"][0]["consumerName"] == "c1"
        wait_until(lambda: value(standalone, "pulsar_rate_in", topic=name) > 0
                   and value(standalone, "pulsar_subscription_msg_rate_out", topic=name, subscription="live") > 0,
                   what="rate gauges in /metrics")
    finally:
        stop.set()
        for t in threads:
            t.join()
    producer.close()
    consumer.close()


def test_kafka_produce_rate_shows_in_topic_stats(standalone, topic):
    producer = Producer({"bootstrap.servers": standalone.bootstrap, "linger.ms": 0})
    stop = threading.Event()

    def produce():
        while not stop.is_set():
            producer.produce(topic, value=b"k" * 50)
            producer.poll(0)
            time.sleep(0.01)
        producer.flush(10)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        wait_until(lambda: _loaded_rate(standalone, topic), what="msgRateIn of a Kafka-written topic")
    finally:
        stop.set()
        thread.join()


def _loaded_rate(standalone, topic):
    try:
        stats = topic_stats(standalone, kafka_stream(topic))
    except OSError:  # not created yet
        return None
    return stats["msgRateIn"] > 0 and stats["msgThroughputIn"] > 0


def test_topics_loaded_by_kafka_count_as_loaded_topics(standalone, topic):
    before = value(standalone, "pulsar_topics_count")
    producer = Producer({"bootstrap.servers": standalone.bootstrap})
    producer.produce(topic, value=b"v")
    assert producer.flush(20) == 0
    assert value(standalone, "pulsar_topics_count") == before + 1  # its one partition, no Pulsar client
