"""Kafka edges applications meet, against a real standalone: any replication factor, replica
assignments, per-record errors (KIP-467) and the topic configs Kafka 3.x still takes though
deprecated. confluent-kafka for what applications do, kafka-python and the raw codec client
for what is on the wire."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic)
from kafka.admin import KafkaAdminClient
from kafka.admin import NewPartitions as PyNewPartitions
from kafka.admin import NewTopic as PyNewTopic
from kafka.errors import InvalidReplicationAssignmentError

from nereus.codec.kafka.records import Record, build_batch

from .raw import RawKafka

TIMEOUT = 20


@pytest.fixture(scope="module")
def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0]


def partitions_of(admin, topic):
    meta = admin.list_topics(topic, timeout=TIMEOUT).topics[topic]
    assert meta.error is None, meta.error
    return [meta.partitions[i] for i in sorted(meta.partitions)]


def create(admin, topic, *args, **kw):
    admin.create_topics([NewTopic(topic, *args, **kw)], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)


# -- 1. replication factor -------------------------------------------------------------------
def test_any_replication_factor_up_to_the_maximum_on_one_broker(admin, topic):
    # Kafka Streams, Connect and schema registries create their topics with 3 replicas
    create(admin, topic, 2, replication_factor=3)
    parts = partitions_of(admin, topic)
    assert [(p.leader, p.replicas, p.isrs) for p in parts] == [(0, [0], [0])] * 2  # the live brokers
    create(admin, topic + "-d", 1, replication_factor=-1)  # the default
    assert partitions_of(admin, topic + "-d")[0].replicas == [0]
    refused = admin.create_topics([NewTopic(topic + "-x", 1, replication_factor=33)], operation_timeout=TIMEOUT)
    err = error_of(refused[topic + "-x"])
    assert err.code() == KafkaError.INVALID_REPLICATION_FACTOR and "maximum" in err.str()
    assert topic + "-x" not in admin.list_topics(timeout=TIMEOUT).topics


def test_kafka_python_creates_with_three_replicas_and_reads_the_factor_back(broker, topic):
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:
        created = client.create_topics([PyNewTopic(topic, 3, 3)], timeout_ms=TIMEOUT * 1000)["topics"]
        assert [(t["name"], t["error_code"], t["num_partitions"], t["replication_factor"]) for t in created] == \
            [(topic, 0, 3, 3)]
        described = client.describe_topics([topic])[0]
        assert described["error_code"] == 0
        assert [(p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
                for p in sorted(described["partitions"], key=lambda p: p["partition_index"])] == \
            [(i, 0, [0], [0]) for i in range(3)]
    finally:
        client.close()


# -- 2. replica assignments ------------------------------------------------------------------
def test_assignments_on_create_and_on_new_partitions(admin, broker, topic):
    create(admin, topic, 2, replica_assignment=[[0], [0]])
    assert [p.replicas for p in partitions_of(admin, topic)] == [[0], [0]]
    admin.create_partitions([NewPartitions(topic, 4, replica_assignment=[[0], [0]])],
                            operation_timeout=TIMEOUT)[topic].result(TIMEOUT)
    assert [(p.id, p.leader, p.replicas, p.isrs) for p in partitions_of(admin, topic)] == \
        [(i, 0, [0], [0]) for i in range(4)]
    # an unknown broker, a count that does not match the new partitions: refused, nothing changes
    futures = admin.create_partitions([NewPartitions(topic, 5, replica_assignment=[[3]])], operation_timeout=TIMEOUT)
    assert error_of(futures[topic]).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT * 1000)
    try:  # confluent-kafka checks the count itself; kafka-python sends what it is given
        for total, assigned in ((6, [[0]]), (5, [[]]), (5, [[0, 0]])):
            with pytest.raises(InvalidReplicationAssignmentError):
                client.create_partitions({topic: PyNewPartitions(total, assigned)}, timeout_ms=TIMEOUT * 1000)
    finally:
        client.close()
    assert len(partitions_of(admin, topic)) == 4
    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)
    assert [p.replicas for p in partitions_of(admin, topic)] == [[0]] * 5


def test_an_assignment_naming_an_unknown_broker_creates_nothing(admin, topic):
    futures = admin.create_topics([NewTopic(topic, 2, replica_assignment=[[0], [0, 9]])], operation_timeout=TIMEOUT)
    err = error_of(futures[topic])
    assert err.code() == KafkaError.INVALID_REPLICA_ASSIGNMENT and "9" in err.str()
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics


# -- 3. per-record errors ----------------------------------------------------------------------
def _produce_with_keyless(broker, topic, **conf) -> dict[str, list[int]]:
    """100 records, every tenth without a key; each record's delivery outcome by error name."""
    outcome: dict[str, list[int]] = {}
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 200, "retries": 0, **conf})

    def delivered(err, msg, i):
        outcome.setdefault("ok" if err is None else err.name(), []).append(i)

    for i in range(100):
        key = None if i % 10 == 0 else b"key-%d" % i
        producer.produce(topic, b"value-%d" % i, key=key, partition=0,
                         on_delivery=lambda err, msg, i=i: delivered(err, msg, i))
    assert producer.flush(TIMEOUT) == 0
    return outcome


def test_keyless_records_in_a_compacted_batch_fail_alone_and_the_rest_as_different_records(admin, broker, topic):
    create(admin, topic, 1, config={"cleanup.policy": "compact"})
    outcome = _produce_with_keyless(broker, topic)
    keyless = list(range(0, 100, 10))
    assert outcome == {"INVALID_RECORD": keyless,
                       "_INVALID_DIFFERENT_RECORD": [i for i in range(100) if i % 10]}
    # one record a batch: only the keyless ones fail; the others are stored
    outcome = _produce_with_keyless(broker, topic, **{"batch.size": 1})
    assert outcome == {"INVALID_RECORD": keyless, "ok": [i for i in range(100) if i % 10]}


def test_record_errors_on_the_wire_name_each_record(admin, broker, topic):
    create(admin, topic, 1, config={"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    batch = build_batch([Record(i, now, None if i in (1, 4) else b"k", b"v") for i in range(6)])
    raw = RawKafka(broker.bootstrap)
    try:
        answer = raw.produce(topic, 0, batch, version=9)
        assert answer.error_code == KafkaError.INVALID_RECORD
        assert [e.batch_index for e in answer.record_errors] == [1, 4]
        assert all("without key" in e.batch_index_error_message for e in answer.record_errors)
        assert "2 record errors" in answer.error_message
        assert raw.produce(topic, 0, batch, version=7).error_code == KafkaError.INVALID_RECORD  # before v8: none named
        assert raw.fetch(topic, 0, 0).high_watermark == 0  # nothing of the refused batches was stored
    finally:
        raw.close()


def test_timestamps_out_of_the_topics_bounds_are_refused_per_record(admin, broker, topic):
    hour = 3_600_000
    create(admin, topic, 1, config={"message.timestamp.before.max.ms": str(hour),
                                    "message.timestamp.after.max.ms": str(hour)})
    now = int(time.time() * 1000)
    stamps = [now, now - 2 * hour, now + 10 * 60_000, now + 2 * hour]
    raw = RawKafka(broker.bootstrap)
    try:
        answer = raw.produce(topic, 0, build_batch([Record(i, t, b"k", b"v") for i, t in enumerate(stamps)]))
        assert answer.error_code == KafkaError.INVALID_TIMESTAMP
        assert [e.batch_index for e in answer.record_errors] == [1, 3]
        assert "out of range" in answer.record_errors[0].batch_index_error_message
        assert raw.produce(topic, 0, build_batch([Record(0, now, b"k", b"v")])).error_code == 0
    finally:
        raw.close()
    # the deprecated difference bound stands in for both while they have their defaults
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    resource.add_incremental_config(ConfigEntry("message.timestamp.before.max.ms", None,
                                                incremental_operation=AlterConfigOpType.DELETE))
    resource.add_incremental_config(ConfigEntry("message.timestamp.after.max.ms", None,
                                                incremental_operation=AlterConfigOpType.DELETE))
    resource.add_incremental_config(ConfigEntry("message.timestamp.difference.max.ms", str(hour),
                                                incremental_operation=AlterConfigOpType.SET))
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    failed = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "retries": 0})

    def wait_for_the_new_bound():
        producer.produce(topic, b"old", timestamp=int(time.time() * 1000) - 2 * hour,
                         on_delivery=lambda err, msg: failed.append(err))
        producer.flush(TIMEOUT)
        return failed[-1] is not None

    deadline = time.monotonic() + TIMEOUT  # topic configs are cached by brokers for a moment
    while not wait_for_the_new_bound():
        assert time.monotonic() < deadline, "the difference bound never took effect"
    assert failed[-1].code() == KafkaError.INVALID_TIMESTAMP


def test_create_time_bounds_do_not_apply_to_log_append_time_topics(admin, broker, topic):
    create(admin, topic, 1, config={"message.timestamp.type": "LogAppendTime",
                                    "message.timestamp.before.max.ms": "1000"})
    raw = RawKafka(broker.bootstrap)
    try:
        old = build_batch([Record(0, 1_000_000_000_000, b"k", b"v")])
        assert raw.produce(topic, 0, old).error_code == 0
    finally:
        raw.close()


# -- 4. deprecated topic configs -----------------------------------------------------------------
DEPRECATED = {"message.format.version": "0.10.0.0", "message.downconversion.enable": "false"}


def test_deprecated_topic_configs_are_taken_stored_and_described(admin, topic):
    create(admin, topic, 1, config=DEPRECATED)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
    assert {name: described[name].value for name in DEPRECATED} == DEPRECATED
    resource.add_incremental_config(ConfigEntry("message.format.version", "3.0-IV1",
                                                incremental_operation=AlterConfigOpType.SET))
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)],
                                       request_timeout=TIMEOUT)
    assert list(described.values())[0].result(TIMEOUT)["message.format.version"].value == "3.0-IV1"
    bad = admin.create_topics([NewTopic(topic + "-x", 1, config={"message.format.version": "9.9"})],
                              operation_timeout=TIMEOUT)
    assert error_of(bad[topic + "-x"]).code() == KafkaError.INVALID_CONFIG


def test_cleanup_policy_may_be_emptied_by_subtracting_its_last_policy(admin, broker, topic):
    """An empty cleanup.policy (neither delete nor compact: records are kept) is a value Kafka takes."""
    create(admin, topic, 1)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    resource.add_incremental_config(ConfigEntry("cleanup.policy", "delete",
                                                incremental_operation=AlterConfigOpType.SUBTRACT))
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)], request_timeout=TIMEOUT)
    assert list(described.values())[0].result(TIMEOUT)["cleanup.policy"].value == ""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"keyless")  # not compacted: a record without a key is fine
    assert producer.flush(TIMEOUT) == 0
    bad = admin.create_topics([NewTopic(topic + "-x", 1, config={"cleanup.policy": "delete,shred"})],
                              operation_timeout=TIMEOUT)
    assert error_of(bad[topic + "-x"]).code() == KafkaError.INVALID_CONFIG


def test_describe_configs_documents_what_is_ignored(broker, topic):
    raw = RawKafka(broker.bootstrap)
    try:
        raw.metadata([topic])  # auto-created
        from kio.index import load_request_schema

        from nereus.codec.kafka import make, nested
        cls = load_request_schema(32, 4)
        resource = make(nested(cls, "DescribeConfigsResource"), resource_type=2, resource_name=topic,
                        configuration_keys=("message.format.version", "message.downconversion.enable"))
        answer = raw.request(32, 4, resources=(resource,), include_synonyms=False, include_documentation=True)
        docs = {c.name: c.documentation for c in answer.results[0].configs}
        assert set(docs) == {"message.format.version", "message.downconversion.enable"}
        assert all("Deprecated" in doc and "ignored" in doc for doc in docs.values()), docs
    finally:
        raw.close()


# -- commits without a generation ----------------------------------------------------------------
def test_a_commit_without_a_generation_is_taken_only_while_the_group_has_no_members(admin, broker, topic, group):
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka import ConsumerGroupTopicPartitions

    create(admin, topic, 1)
    # an assign()-only consumer of the consumer protocol names its own member id, at epoch -1
    solo = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "group.protocol": "consumer",
                     "enable.auto.commit": False})
    try:
        solo.assign([TopicPartition(topic, 0, 0)])
        solo.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    finally:
        solo.close()
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while not member.assignment():
            assert time.monotonic() < deadline, "never assigned"
            member.poll(0.2)
        wanted = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 5)])
        answer = admin.alter_consumer_group_offsets([wanted], request_timeout=TIMEOUT)[group]
        try:
            errors = [tp.error for tp in answer.result(TIMEOUT).topic_partitions]
        except KafkaException as exc:  # reported for the whole request by some client versions
            errors = [exc.args[0]]
        assert [e.code() if e is not None else None for e in errors] == [KafkaError.UNKNOWN_MEMBER_ID]
        committed = member.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
        assert committed[0].offset == 3
    finally:
        member.close()
