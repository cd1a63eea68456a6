"""transactional.id.expiration.ms against a real standalone: an idle transactional id is forgotten."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.conftest import wait_until
from tests.kafka.raw import RawKafka
from tests.standalone_process import Standalone

TRANSACTIONAL_ID_NOT_FOUND = 105


@pytest.fixture(scope="module")
def short_expiry_broker(tmp_path_factory):
    node = Standalone(tmp_path_factory.mktemp("txn-expiry"),
                      ["--compaction-interval", "0", "--transactional-id-expiration", "1"])
    node.start()
    yield node
    node.stop()


def _producer(node, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": node.bootstrap, "transactional.id": tid,
                         "transaction.timeout.ms": 20000, "linger.ms": 5})
    producer.init_transactions(30)
    return producer


def test_an_idle_transactional_id_expires_and_its_zombie_stays_fenced(short_expiry_broker):
    node, tid, topic = short_expiry_broker, f"tid-{uuid.uuid4().hex[:8]}", f"exp-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    zombie = _producer(node, tid)
    zombie.begin_transaction()
    zombie.produce(topic, b"committed", partition=0)
    zombie.commit_transaction(30)
    raw = RawKafka(node.bootstrap)
    try:
        def forgotten() -> bool:
            return raw.request(65, 0, transactional_ids=(tid,)).transaction_states[0].error_code \
                == TRANSACTIONAL_ID_NOT_FOUND
        wait_until(forgotten, timeout=30)
    finally:
        raw.close()
    successor = _producer(node, tid)  # starts afresh, with a new producer id
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(30)
    # The first producer's id and epoch no longer name the transactional id: its next transaction fails.
    with pytest.raises(KafkaException):
        zombie.begin_transaction()
        zombie.produce(topic, b"zombie", partition=0)
        zombie.commit_transaction(10)
