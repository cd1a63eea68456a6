"""KIP-392: a Kafka consumer with ``client.rack`` fetches from a broker of its own zone, or any when it has none."""

from __future__ import annotations

import re
import time

from .clients import PUBLIC


def _fetched_bytes(broker) -> float:
    """The broker's ``nereus_storage_fetched_bytes`` (every source): what it served to readers."""
    total = 0.0
    for line in broker.metrics().splitlines():
        m = re.match(r"nereus_storage_fetched_bytes_total(\{[^}]*\})?\s+([0-9.e+]+)$", line)
        if m:
            total += float(m.group(2))
    return total


def test_consumer_with_client_rack_fetches_from_its_zone(make_cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(["a", "a", "b"])
    zone_b = [b for b in cluster.brokers_list if b.zone == "b"]
    zone_a = [b for b in cluster.brokers_list if b.zone == "a"]
    topic, partitions = "racked", 6
    bootstrap = zone_a[0].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    value = b"v" * 1000
    for i in range(partitions * 50):
        producer.produce(topic, value, partition=i % partitions)
    assert producer.flush(90) == 0

    owners = cluster.owners()
    in_a = [p for p in range(partitions) if owners.get(f"{PUBLIC}{topic}-partition-{p}") in {b.name for b in zone_a}]
    assert in_a, f"no partition of {topic} is written in zone a: {owners}"
    before = {b.name: _fetched_bytes(b) for b in cluster.brokers_list}

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "racked", "client.rack": "b",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in in_a])
    got = 0
    deadline = time.monotonic() + 90
    while got < 50 * len(in_a) and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(500, timeout=0.5) if m.error() is None)
    assert got == 50 * len(in_a)

    delta = {b.name: _fetched_bytes(b) - before[b.name] for b in cluster.brokers_list}
    served_b = sum(delta[b.name] for b in zone_b)
    assert served_b >= got * len(value), f"zone b served {served_b} bytes of {got * len(value)}: {delta}"
    assert all(delta[b.name] < len(value) for b in zone_a), f"zone a brokers served records: {delta}"

    # Zone b loses its only broker: the consumer falls back to the leaders in zone a and keeps reading.
    zone_b[0].kill()
    for i in range(20 * len(in_a)):
        producer.produce(topic, value, partition=in_a[i % len(in_a)])
    assert producer.flush(90) == 0
    deadline = time.monotonic() + 90
    while got < 70 * len(in_a) and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(500, timeout=0.5) if m.error() is None)
    consumer.close()
    assert got == 70 * len(in_a), f"{got - 50 * len(in_a)} of {20 * len(in_a)} records after zone b went away"
