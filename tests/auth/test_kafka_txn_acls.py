"""Kafka ACLs on transactional ids (WRITE to use one, DESCRIBE to find its coordinator), on a standalone with
authorization (confluent-kafka over SASL_PLAINTEXT)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AclOperation, NewTopic, ResourceType

from tests.auth import test_kafka_acls
from tests.auth.test_kafka_acls import _acl, _admin, _conf, _consume, _wait

broker = test_kafka_acls.broker  # the same standalone set-up (a module-scoped fixture: one per module)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_a_transactional_id_needs_write_on_it(broker):
    topic, tid = _name("txacl"), _name("tid")
    admin = _admin(broker)
    _wait(admin.create_topics([NewTopic(topic, 1)]))
    _wait(admin.create_acls([_acl(topic, "User:txwriter", AclOperation.WRITE),
                             _acl(topic, "User:txwriter", AclOperation.DESCRIBE)]))
    producer = Producer({**_conf(broker, "txwriter"), "transactional.id": tid})
    with pytest.raises(KafkaException) as refused:
        producer.init_transactions(20)
    assert refused.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    _wait(admin.create_acls([_acl(tid, "User:txwriter", AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID)]))
    producer = Producer({**_conf(broker, "txwriter"), "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in-a-transaction")
    producer.commit_transaction(30)
    got, error = _consume(broker, "admin", topic, _name("g"), 1)
    assert got == [b"in-a-transaction"], error
