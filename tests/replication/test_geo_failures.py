"""Geo-replication through kill -9 of either cluster, and a Kafka topic replicated."""

from __future__ import annotations

import json

import pulsar
import pytest
from kafka import KafkaConsumer, KafkaProducer

from tests.replication.geo import admin, clusters, replicate_namespace
from tests.waiting import wait_until


@pytest.fixture
def pair(tmp_path):
    with clusters(tmp_path, ["east", "west"]) as made:
        yield made


def receive_all(consumer, count: int) -> list[bytes]:
    out = []
    while len(out) < count:
        message = consumer.receive(timeout_millis=60_000)
        consumer.acknowledge(message)
        out.append(message.data())
    return out


def test_kill_9_of_the_source_and_then_of_the_remote_stores_nothing_twice_and_loses_nothing(pair):
    east, west = pair
    replicate_namespace(pair, "geo/kill")
    topic = "persistent://geo/kill/t"
    west_client = pulsar.Client(west.node.url)
    east_client = pulsar.Client(east.node.url, operation_timeout_seconds=60)
    producer = east_client.create_producer(topic, batching_enabled=True, batching_max_messages=50,
                                           block_if_queue_full=True, send_timeout_millis=0)
    try:
        sent = 0

        def publish(count: int) -> None:
            nonlocal sent
            for _ in range(count):
                producer.send_async(f"m-{sent}".encode(), None)
                sent += 1
            producer.flush()

        publish(1000)
        east.node.kill()
        east.node.start()
        publish(1000)
        wait_until(lambda: json.dumps(admin(east.node, "GET", "/persistent/geo/kill/t/stats")["replication"])
                   .count('"connected": true'), "east's replicator connected again")
        west.node.kill()
        west.node.start()
        publish(1000)
        # What west stores, read by a subscription made now (a consumer's own acks may be lost
        # with a killed broker, so deliveries to it are at least once by design).
        consumer = west_client.subscribe(topic, "w", initial_position=pulsar.InitialPosition.Earliest)
        got = receive_all(consumer, 3000)
        assert got == [f"m-{i}".encode() for i in range(3000)]
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=1000)
    finally:
        east_client.close()
        west_client.close()


def test_a_kafka_topic_is_replicated_and_read_by_a_kafka_consumer_on_the_other_side(pair):
    east, west = pair
    for cluster in pair:
        admin(cluster.node, "POST", "/tenants/public", {"adminRoles": [], "allowedClusters": ["east", "west"]})
    replicate_namespace(pair, "public/default")
    producer = KafkaProducer(bootstrap_servers=east.node.bootstrap, acks="all")
    for i in range(100):
        producer.send("kafka-geo", key=f"k{i % 3}".encode(), value=f"v{i}".encode(), headers=[("h", str(i).encode())])
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=west.node.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=2000)
    consumer.subscribe(["kafka-geo"])
    got = []

    def read() -> bool:
        got.extend(consumer)
        return len(got) >= 100

    wait_until(read, "the Kafka records in west", timeout=60)
    consumer.close()
    assert [(r.key, r.value, r.headers) for r in got] == [
        (f"k{i % 3}".encode(), f"v{i}".encode(), [("h", str(i).encode())]) for i in range(100)]


def test_a_topic_nobody_loads_after_a_restart_still_replicates_its_backlog(pair):
    east, west = pair
    replicate_namespace(pair, "geo/quiet")
    topic = "persistent://geo/quiet/t"
    west.node.kill()  # down while east publishes: everything waits in east's backlog
    client = pulsar.Client(east.node.url)
    producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    for i in range(200):
        producer.send_async(f"q-{i}".encode(), None)
    producer.flush()
    client.close()
    east.node.kill()  # and no client of the topic comes back to east
    east.node.start()
    west.node.start()
    west_client = pulsar.Client(west.node.url)
    try:
        consumer = west_client.subscribe(topic, "w", initial_position=pulsar.InitialPosition.Earliest)
        assert receive_all(consumer, 200) == [f"q-{i}".encode() for i in range(200)]
    finally:
        west_client.close()
