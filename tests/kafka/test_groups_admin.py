"""Consumer groups (rebalance, committed offsets across kill -9) and admin operations."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

from .conftest import wait_until


def _produce(bootstrap: str, topic: str, n: int, start: int = 0, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + n):
        producer.produce(topic, value=b"%d" % i, partition=i % partitions)
    assert producer.flush(20) == 0


def _consumer(bootstrap: str, group: str, **extra) -> Consumer:
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    conf.update(extra)
    return Consumer(conf)


def test_admin_operations(broker, topic, group):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(10)
    with pytest.raises(Exception) as exc:
        admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(10)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    meta = admin.list_topics(timeout=10)
    assert len(meta.topics[topic].partitions) == 3
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5
    configs = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    entries = list(configs.values())[0].result(10)
    assert entries["cleanup.policy"].value == "delete"
    assert int(entries["max.message.bytes"].value) > 1 << 20  # the limit the broker enforces, not Kafka's default
    cluster = admin.describe_cluster().result(10)
    assert len(cluster.nodes) == 1 and cluster.cluster_id
    # a group with committed offsets: listed, described, deleted
    _produce(broker.bootstrap, topic, 10, partitions=5)
    consumer = _consumer(broker.bootstrap, group)
    consumer.assign([TopicPartition(topic, 0, 0)])
    consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    consumer.close()
    listed = admin.list_consumer_groups().result(10)
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert described.group_id == group
    admin.delete_consumer_groups([group])[group].result(10)
    admin.delete_topics([topic])[topic].result(10)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics)


def test_rebalance_across_two_consumers(broker, topic, group):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=4)])[topic].result(10)
    _produce(broker.bootstrap, topic, 40, partitions=4)
    first = _consumer(broker.bootstrap, group)
    first.subscribe([topic])
    seen: dict[int, set] = {0: set(), 1: set()}

    def poll(consumer, idx):
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            seen[idx].add((msg.partition(), msg.offset()))

    wait_until(lambda: (poll(first, 0), len(first.assignment()) == 4)[1], timeout=30)
    second = _consumer(broker.bootstrap, group)
    second.subscribe([topic])

    def balanced():
        poll(first, 0)
        poll(second, 1)
        return len(first.assignment()) == 2 and len(second.assignment()) == 2

    wait_until(balanced, timeout=40)
    assert {tp.partition for tp in first.assignment()} | {tp.partition for tp in second.assignment()} == {0, 1, 2, 3}
    second.close()  # LeaveGroup: the first consumer gets all partitions back
    wait_until(lambda: (poll(first, 0), len(first.assignment()) == 4)[1], timeout=40)
    first.close()


def test_committed_offsets_survive_kill_and_restart(fresh_broker, topic, group):
    fresh_broker.start()
    _produce(fresh_broker.bootstrap, topic, 20)
    consumer = _consumer(fresh_broker.bootstrap, group)
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 12 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg)
    consumer.commit(message=got[11], asynchronous=False)  # commits offset 12
    fresh_broker.kill()
    consumer.close()
    fresh_broker.start()
    _produce(fresh_broker.bootstrap, topic, 5, start=20)
    again = _consumer(fresh_broker.bootstrap, group)
    again.subscribe([topic])
    rest = []
    deadline = time.monotonic() + 40
    while len(rest) < 13 and time.monotonic() < deadline:
        msg = again.poll(0.5)
        if msg is not None and not msg.error():
            rest.append(msg)
    assert [m.offset() for m in rest] == list(range(12, 25))
    assert rest[0].value() == b"12" and rest[-1].value() == b"24"
    again.close()
