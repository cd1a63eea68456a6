"""The admin APIs of Kafka's tools about replicas, log directories, topic pages, config resources and
offset deletion, against a real standalone (confluent-kafka where it has the call, else the wire)."""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import (OFFSET_INVALID, Consumer, ConsumerGroupTopicPartitions, ElectionType, KafkaError,
                             Producer, TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import errors as Errors
from kafka.structs import TopicPartition as PyPartition
from kio.index import load_request_schema

from nereus.codec.kafka import make, nested


TIMEOUT = 20


@pytest.fixture
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(admin, topic: str, partitions: int) -> None:
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(TIMEOUT)


def test_preferred_leader_elections_are_never_needed(admin, topic):
    create(admin, topic, 3)
    future = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, i) for i in range(3)] +
                                 [TopicPartition(topic, 7)])
    results = future.result(TIMEOUT)
    codes = {tp.partition: (err.code() if err is not None else None) for tp, err in results.items()}
    assert codes == {0: KafkaError.ELECTION_NOT_NEEDED, 1: KafkaError.ELECTION_NOT_NEEDED,
                     2: KafkaError.ELECTION_NOT_NEEDED, 7: KafkaError.UNKNOWN_TOPIC_OR_PART}


def test_log_dirs_hold_what_each_partition_stores(broker, admin, raw, topic):
    create(admin, topic, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(10):
        producer.produce(topic, b"x" * 1000, partition=0)
    assert producer.flush(TIMEOUT) == 0
    cls = load_request_schema(35, 4)
    asked = (make(nested(cls, "DescribableLogDirTopic"), topic=topic, partitions=(0, 1)),)
    resp = raw.request(35, 4, topics=asked)
    [result] = resp.results
    assert (result.error_code.value, result.log_dir) == (0, "object-store")
    [described] = result.topics
    sizes = {p.partition_index: p.partition_size for p in described.partitions}
    assert sizes[1] == 0 and 10_000 <= sizes[0] < 20_000  # stored bytes, batch overhead included
    # Moving a replica to the directory it is in: nothing to do; elsewhere: no such directory.
    cls = load_request_schema(34, 2)

    def move(path):
        topics = (make(nested(cls, "AlterReplicaLogDirTopic"), name=topic, partitions=(0,)),)
        resp = raw.request(34, 2, dirs=(make(nested(cls, "AlterReplicaLogDir"), path=path, topics=topics),))
        return resp.results[0].partitions[0].error_code.value
    assert move("object-store") == 0
    assert move("/var/lib/kafka") == KafkaError.LOG_DIR_NOT_FOUND


def test_a_reassignment_completes_at_once_and_sets_the_replica_list(broker, admin, raw, topic):
    create(admin, topic, 2)
    cls = load_request_schema(45, 0)
    node = raw.metadata([topic]).brokers[0].node_id

    def reassign(partition, replicas):
        parts = (make(nested(cls, "ReassignablePartition"), partition_index=partition, replicas=replicas),)
        resp = raw.request(45, 0, timeout=datetime.timedelta(seconds=10),
                           topics=(make(nested(cls, "ReassignableTopic"), name=topic, partitions=parts),))
        return resp.responses[0].partitions[0].error_code.value
    assert reassign(1, (node,)) == 0
    assert reassign(0, (node, 999)) == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert reassign(0, None) == KafkaError.NO_REASSIGNMENT_IN_PROGRESS
    assert reassign(5, (node,)) == KafkaError.UNKNOWN_TOPIC_OR_PART
    partitions = {p.partition_index: p for p in raw.metadata([topic]).topics[0].partitions}
    assert tuple(partitions[1].replica_nodes) == (node,)
    listed = raw.request(46, 0, timeout=datetime.timedelta(seconds=10), topics=None)
    assert (listed.error_code.value, listed.topics) == (0, ())


def test_topic_partitions_come_a_page_at_a_time(admin, raw, topic):
    create(admin, topic, 5)
    cls = load_request_schema(75, 0)
    other = topic + "-b"
    create(admin, other, 2)
    asked = tuple(make(nested(cls, "TopicRequest"), name=n) for n in (other, topic, topic + "-missing"))

    def page(cursor=None, limit=3):
        return raw.request(75, 0, topics=asked, response_partition_limit=limit, cursor=cursor)
    first = page()
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in first.topics] == [(topic, [0, 1, 2])]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == (topic, 3)
    second = page(make(nested(cls, "Cursor"), topic_name=topic, partition_index=3))
    answered = [(t.name, t.error_code.value, [p.partition_index for p in t.partitions]) for t in second.topics]
    assert answered == [(topic, 0, [3, 4]), (other, 0, [0])]
    assert (second.next_cursor.topic_name, second.next_cursor.partition_index) == (other, 1)
    rest = page(make(nested(cls, "Cursor"), topic_name=other, partition_index=1), limit=100)
    answered = [(t.name, t.error_code.value, [p.partition_index for p in t.partitions]) for t in rest.topics]
    assert answered == [(other, 0, [1]), (topic + "-missing", KafkaError.UNKNOWN_TOPIC_OR_PART, [])]
    assert rest.next_cursor is None
    assert all(p.leader_id >= 0 and p.replica_nodes for t in first.topics for p in t.partitions)


def test_config_resources_list_topics_brokers_and_configured_groups(admin, raw, topic):
    create(admin, topic, 1)
    resp = raw.request(74, 1, resource_types=())
    assert resp.error_code.value == 0
    found = {(r.resource_name, r.resource_type) for r in resp.config_resources}
    node = raw.metadata([topic]).brokers[0].node_id
    assert {(topic, 2), (str(node), 4), (str(node), 8)} <= found
    only_brokers = raw.request(74, 1, resource_types=(4,))
    assert {r.resource_type for r in only_brokers.config_resources} == {4}
    assert raw.request(74, 0).config_resources == ()  # v0: client metrics subscriptions, none here


def test_a_group_s_offsets_are_deleted_unless_it_consumes_the_topic(broker, admin, topic, group):
    create(admin, topic, 2)
    other = topic + "-other"
    create(admin, other, 1)
    py_admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 6),
                                 TopicPartition(other, 0, 7)], asynchronous=False)
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while not consumer.assignment():
            assert time.monotonic() < deadline
            consumer.poll(0.2)
        # Subscribed to ``topic``: its offsets stay; ``other``'s go.
        codes = py_admin.delete_group_offsets(group, [PyPartition(topic, 0), PyPartition(other, 0)])
        assert codes == {PyPartition(topic, 0): Errors.GroupSubscribedToTopicError,
                         PyPartition(other, 0): Errors.NoError}
        committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(other, 0)], timeout=TIMEOUT)
        assert [tp.offset for tp in committed] == [5, OFFSET_INVALID]
    finally:
        consumer.close()
    # Empty now: any of its offsets may go.
    assert py_admin.delete_group_offsets(group, [PyPartition(topic, 1)]) == {PyPartition(topic, 1): Errors.NoError}
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT)
    assert sorted((tp.topic, tp.partition, tp.offset) for tp in listed.topic_partitions) == [(topic, 0, 5)]
    with pytest.raises(Errors.GroupIdNotFoundError):
        py_admin.delete_group_offsets(group + "-none", [PyPartition(topic, 0)])
    py_admin.close()


def test_authorized_operations_are_reported_when_asked(admin, topic):
    """Without an authorizer every operation is allowed: the topic's eight, the cluster's seven."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    create(admin, topic, 1)
    [(_, future)] = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True,
                                          request_timeout=TIMEOUT).items()
    assert set(future.result(TIMEOUT).authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT).result(TIMEOUT)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
    plain = admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT)
    assert plain.authorized_operations is None  # not asked: none reported
