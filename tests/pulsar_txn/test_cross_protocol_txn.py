"""Transactions across protocols: one stream, one outcome, whichever client reads it."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.pulsar_txn.txn_client import TxnClient

pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")


def test_pulsar_consumer_never_sees_an_aborted_kafka_transaction(standalone):
    topic = f"txnx-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap,
                                         "transactional.id": f"tx-{topic}", "linger.ms": 5})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce(topic, value=b"kafka-aborted")
    producer.flush(20)
    producer.abort_transaction(20)
    producer.begin_transaction()
    producer.produce(topic, value=b"kafka-committed")
    producer.commit_transaction(20)
    client = pulsar.Client(standalone.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(f"persistent://public/default/{topic}", "s",
                                    initial_position=pulsar.InitialPosition.Earliest)
        msg = consumer.receive(timeout_millis=10_000)
        assert msg.data() == b"kafka-committed"
        consumer.acknowledge(msg)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=700)
    finally:
        client.close()


def test_kafka_read_committed_never_sees_an_aborted_pulsar_transaction(standalone):
    topic = f"txnx-{uuid.uuid4().hex[:8]}"
    txn = TxnClient(standalone.pulsar_port)
    txn.connect_coordinator()
    producer = txn.create_producer(f"persistent://public/default/{topic}")
    aborted, committed = txn.new_txn(), txn.new_txn()
    producer.send(b"pulsar-aborted", aborted)
    producer.send(b"pulsar-committed", committed)
    txn.end_txn(aborted, commit=False)
    txn.end_txn(committed, commit=True)
    txn.close()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": standalone.bootstrap, "group.id": f"g-{topic}",
                                        "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    got = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and not got:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        while (msg := consumer.poll(0.7)) is not None:
            if not msg.error():
                got.append(msg.value())
    finally:
        consumer.close()
    assert got == [b"pulsar-committed"]
