"""Kafka ACLs on the group, config, delete-records, idempotent-producer and share-group APIs of a real
standalone with authorization (confluent-kafka over SASL_PLAINTEXT; a raw client on the PLAINTEXT
listener, whose principal is User:ANONYMOUS, for the requests no client library sends on its own)."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, ConfigResource, NewTopic, OffsetSpec,
                                   ResourceType)
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from nereus.codec.kafka import make, nested
from tests.auth import test_kafka_acls
from tests.auth.test_kafka_acls import _acl, _admin, _conf, _consume, _produce, _stored, _wait
from tests.kafka.raw import RawKafka

broker = test_kafka_acls.broker  # the same standalone set-up (a module-scoped fixture: one per module)

SECONDS = datetime.timedelta(seconds=10)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _deny(name: str, principal: str, operation, resource=ResourceType.GROUP) -> AclBinding:
    return AclBinding(resource, name, _acl(name, principal, operation).resource_pattern_type, principal, "*",
                      operation, AclPermissionType.DENY)


def _error(future) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=30)
    return refused.value.args[0]


def test_group_admin_configs_and_delete_records_need_their_acls(broker):
    topic, mine, other = _name("cov"), _name("mine"), _name("other")
    admin = _admin(broker)
    _wait(admin.create_topics([NewTopic(topic, 1)]))
    _wait(admin.create_acls([_acl(topic, "User:member", AclOperation.READ),
                             _acl(mine, "User:member", AclOperation.READ, ResourceType.GROUP)]))
    assert _produce(broker, "admin", topic, b"one") is None
    for role, group in (("member", mine), ("admin", other)):
        got, error = _consume(broker, role, topic, group, 1)
        assert got == [b"one"], error

    member = _admin(broker, "member")
    listed = {g.group_id for g in member.list_consumer_groups().result(timeout=30).valid}
    assert mine in listed and other not in listed
    assert {mine, other} <= {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}

    described = member.describe_consumer_groups([mine, other])
    assert described[mine].result(timeout=30).group_id == mine
    assert _error(described[other]).code() == KafkaError.GROUP_AUTHORIZATION_FAILED

    assert _error(member.delete_consumer_groups([mine])[mine]).code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    _wait(admin.create_acls([_acl(mine, "User:member", AclOperation.DELETE, ResourceType.GROUP)]))
    member.delete_consumer_groups([mine])[mine].result(timeout=30)

    topic_res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    broker_res = ConfigResource(ConfigResource.Type.BROKER, "0")
    assert _error(member.describe_configs([topic_res])[topic_res]).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _error(member.describe_configs([broker_res])[broker_res]).code() == \
        KafkaError.CLUSTER_AUTHORIZATION_FAILED
    _wait(admin.create_acls([_acl(topic, "User:member", AclOperation.DESCRIBE_CONFIGS)]))
    assert "retention.ms" in member.describe_configs([topic_res])[topic_res].result(timeout=30)

    trim = [TopicPartition(topic, 0, 1)]
    refused = member.delete_records(trim)[trim[0]]
    assert _error(refused).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _stored(broker, topic) == 1
    low = admin.list_offsets({TopicPartition(topic, 0): _earliest()})
    assert list(low.values())[0].result(timeout=30).offset == 0  # nothing was trimmed
    _wait(admin.create_acls([_acl(topic, "User:member", AclOperation.DELETE)]))
    assert member.delete_records(trim)[trim[0]].result(timeout=30).low_watermark == 1


def _earliest():
    return OffsetSpec.earliest()


def _end_offset(admin, topic: str) -> int:
    answer = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()})
    return list(answer.values())[0].result(timeout=30).offset


def _idempotent_error(node, role: str, topic: str) -> KafkaError | None:
    """The error an idempotent producer of ``role`` reports first (None: its record was written)."""
    errors, outcome = [], []
    producer = Producer({**_conf(node, role), "enable.idempotence": True, "message.timeout.ms": 8000,
                         "error_cb": errors.append})
    producer.produce(topic, b"x", on_delivery=lambda err, _msg: outcome.append(err))
    deadline = time.monotonic() + 20
    while not outcome and not errors and time.monotonic() < deadline:
        try:
            producer.poll(0.2)
        except KafkaException as exc:  # a fatal error raises out of the error callback
            errors.append(exc.args[0])
    return errors[0] if errors else outcome[0] if outcome else KafkaError(KafkaError._TIMED_OUT)


def test_idempotent_producer_needs_idempotent_write_or_a_topic_write(broker):
    topic, other = _name("idem"), _name("idem-other")
    admin = _admin(broker)
    _wait(admin.create_topics([NewTopic(topic, 1), NewTopic(other, 1)]))
    _wait(admin.create_acls([_acl(topic, "User:reader", AclOperation.DESCRIBE)]))
    refused = _idempotent_error(broker, "reader", topic)
    assert refused is not None and refused.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert _end_offset(admin, topic) == 0

    # WRITE on some other topic lets InitProducerId through (the write itself is then refused)
    _wait(admin.create_acls([_acl(other, "User:reader", AclOperation.WRITE)]))
    refused = _idempotent_error(broker, "reader", topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _idempotent_error(broker, "reader", other) is None
    assert _end_offset(admin, topic) == 0 and _end_offset(admin, other) == 1
    _wait(admin.create_acls([_acl("kafka-cluster", "User:cluster-idem", AclOperation.IDEMPOTENT_WRITE,
                                  ResourceType.BROKER)]))
    refused = _idempotent_error(broker, "cluster-idem", topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED  # past InitProducerId


def _join(raw: RawKafka, group: str, member: str = ""):
    cls = load_request_schema(11, 5)
    protocol = make(nested(cls, "JoinGroupRequestProtocol"), name="range", metadata=b"")
    return raw.request(11, 5, group_id=group, session_timeout=SECONDS, rebalance_timeout=SECONDS,
                       member_id=member, group_instance_id=None, protocol_type="consumer", protocols=(protocol,))


def _sync(raw: RawKafka, group: str, member: str, generation: int):
    cls = load_request_schema(14, 3)
    assignment = make(nested(cls, "SyncGroupRequestAssignment"), member_id=member, assignment=b"")
    return raw.request(14, 3, group_id=group, generation_id=generation, member_id=member, group_instance_id=None,
                       assignments=(assignment,))


def _heartbeat(raw: RawKafka, group: str, member: str, generation: int):
    return raw.request(12, 3, group_id=group, generation_id=generation, member_id=member, group_instance_id=None)


def _leave(raw: RawKafka, group: str, member: str):
    identity = make(nested(load_request_schema(13, 3), "MemberIdentity"), member_id=member, group_instance_id=None)
    return raw.request(13, 3, group_id=group, members=(identity,))


def test_sync_heartbeat_and_leave_refused_once_the_group_is_denied(broker):
    group = _name("anon")
    admin = _admin(broker)
    _wait(admin.create_acls([_acl(group, "User:ANONYMOUS", AclOperation.READ, ResourceType.GROUP)]))
    raw = RawKafka(broker.bootstrap)
    try:
        member = _join(raw, group).member_id  # v5: the first join answers MEMBER_ID_REQUIRED with the id
        joined = _join(raw, group, member)
        assert joined.error_code == ErrorCode.none
        assert _sync(raw, group, member, joined.generation_id).error_code == ErrorCode.none
        assert _heartbeat(raw, group, member, joined.generation_id).error_code == ErrorCode.none

        _wait(admin.create_acls([_deny(group, "User:ANONYMOUS", AclOperation.READ)]))
        assert _heartbeat(raw, group, member, joined.generation_id).error_code == \
            ErrorCode.group_authorization_failed
        assert _sync(raw, group, member, joined.generation_id).error_code == ErrorCode.group_authorization_failed
        assert _leave(raw, group, member).error_code == ErrorCode.group_authorization_failed
    finally:
        raw.close()
    described = admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert [m.member_id for m in described.members] == [member]  # the refused LeaveGroup left nobody


def _share_heartbeat(raw: RawKafka, group: str, topic: str):
    return raw.request(76, 1, group_id=group, member_id="", member_epoch=0, rack_id=None,
                       subscribed_topic_names=(topic,))


def _share_fetch(raw: RawKafka, group: str, member: str, epoch: int, topic_id):
    cls = load_request_schema(78, 1)
    part = make(nested(cls, "FetchPartition"), partition_index=0, acknowledgement_batches=())
    return raw.request(78, 1, group_id=group, member_id=member, share_session_epoch=epoch,
                       max_wait=datetime.timedelta(milliseconds=200), min_bytes=1, max_bytes=1 << 20,
                       max_records=500, batch_size=500,
                       topics=(make(nested(cls, "FetchTopic"), topic_id=topic_id, partitions=(part,)),),
                       forgotten_topics_data=())


def test_share_group_apis_need_group_and_topic_acls(broker):
    topic, group, other = _name("share"), _name("sg"), _name("sg-other")
    admin = _admin(broker)
    _wait(admin.create_topics([NewTopic(topic, 1)]))
    assert _produce(broker, "admin", topic, b"shared") is None
    raw = RawKafka(broker.bootstrap)
    try:
        assert _share_heartbeat(raw, group, topic).error_code == ErrorCode.group_authorization_failed
        _wait(admin.create_acls([_acl(group, "User:ANONYMOUS", AclOperation.READ, ResourceType.GROUP)]))
        assert _share_heartbeat(raw, group, topic).error_code == ErrorCode.topic_authorization_failed
        _wait(admin.create_acls([_acl(topic, "User:ANONYMOUS", AclOperation.READ)]))
        joined = _share_heartbeat(raw, group, topic)
        assert joined.error_code == ErrorCode.none, joined

        (meta,) = raw.metadata([topic], version=12).topics
        first = _share_fetch(raw, group, joined.member_id, 0, meta.topic_id)
        assert first.error_code == ErrorCode.none
        assert [p.error_code for t in first.responses for p in t.partitions] == [ErrorCode.none]

        _wait(admin.create_acls([_deny(topic, "User:ANONYMOUS", AclOperation.READ, ResourceType.TOPIC)]))
        refused = _share_fetch(raw, group, joined.member_id, 1, meta.topic_id)
        assert [p.error_code for t in refused.responses for p in t.partitions] == \
            [ErrorCode.topic_authorization_failed]
        assert not [a for t in refused.responses for p in t.partitions for a in p.acquired_records]

        described = raw.request(77, 1, group_ids=(group, other), include_authorized_operations=False)
        assert [g.error_code for g in described.groups] == [ErrorCode.none, ErrorCode.group_authorization_failed]
        denied = _share_fetch(raw, other, joined.member_id, 0, meta.topic_id)
        assert denied.error_code == ErrorCode.group_authorization_failed
        ack = raw.request(79, 1, group_id=other, member_id=joined.member_id, share_session_epoch=1, topics=())
        assert ack.error_code == ErrorCode.group_authorization_failed
    finally:
        raw.close()
