"""Subscription types, redelivery, seeks, readers, with the official client."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import timedelta

import pytest

from .conftest import assert_no_more, receive_all


def _produce(client, topic, n, prefix="m", **kw):
    producer = client.create_producer(topic, batching_enabled=False, **kw)
    ids = [producer.send(f"{prefix}{i}".encode()) for i in range(n)]
    producer.close()
    return ids


def _drain(consumer, timeout_ms=1500):
    out = []
    while True:
        try:
            out.append(consumer.receive(timeout_millis=timeout_ms))
        except Exception:
            return out


def test_exclusive_rejects_second_consumer(client, topic, pulsar):
    client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Exclusive)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "ex", consumer_type=pulsar.ConsumerType.Shared)


def test_shared_spreads_messages(client, topic, pulsar):
    a = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
    b = client.subscribe(topic, "sh", consumer_type=pulsar.ConsumerType.Shared, receiver_queue_size=5)
    _produce(client, topic, 40)
    got_a, got_b = [], []
    for consumer, got in ((a, got_a), (b, got_b)):
        for m in _drain(consumer, 1000):
            got.append(m.data())
            consumer.acknowledge(m)
    # A consumer whose queue is full stops getting permits: drain both until done.
    for _ in range(5):
        for consumer, got in ((a, got_a), (b, got_b)):
            for m in _drain(consumer, 300):
                got.append(m.data())
                consumer.acknowledge(m)
    assert sorted(got_a + got_b) == sorted(f"m{i}".encode() for i in range(40))
    assert got_a and got_b


def test_failover_delivers_to_one_active_consumer(client, topic, pulsar):
    first = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="a")
    second = client.subscribe(topic, "fo", consumer_type=pulsar.ConsumerType.Failover, consumer_name="b")
    _produce(client, topic, 5)
    got = _drain(first, 1000)
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(5)]
    assert _drain(second, 300) == []
    for m in got[:2]:
        first.acknowledge(m)
    time.sleep(0.3)  # let the acks reach the broker
    first.close()
    # The standby takes over from the first unacknowledged message, in order.
    assert [m.data() for m in _drain(second, 2000)] == [b"m2", b"m3", b"m4"]


def test_key_shared_keeps_per_key_order(client, topic, pulsar):
    consumers = [client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name=f"k{i}")
                 for i in range(2)]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(8)]
    for i in range(80):
        producer.send(f"{i}".encode(), partition_key=keys[i % len(keys)])
    per_key = defaultdict(list)
    owners = defaultdict(set)
    for index, consumer in enumerate(consumers):
        for m in _drain(consumer, 1500):
            per_key[m.partition_key()].append(int(m.data()))
            owners[m.partition_key()].add(index)
            consumer.acknowledge(m)
    assert sum(len(v) for v in per_key.values()) == 80
    for key, values in per_key.items():
        assert values == sorted(values), key
        assert len(owners[key]) == 1
    assert len({i for s in owners.values() for i in s}) == 2, "both consumers got keys"


def test_negative_ack_redelivers_with_count(client, topic, pulsar):
    consumer = client.subscribe(topic, "nack", consumer_type=pulsar.ConsumerType.Shared,
                                negative_ack_redelivery_delay_ms=100)
    _produce(client, topic, 2)
    first = receive_all(consumer, 2)
    consumer.acknowledge(first[0])
    consumer.negative_acknowledge(first[1])
    again = consumer.receive(timeout_millis=5000)
    assert again.data() == b"m1" and again.redelivery_count() == 1
    consumer.acknowledge(again)
    assert_no_more(consumer, pulsar)


@pytest.mark.slow
def test_ack_timeout_redelivers(client, topic, pulsar):
    # The client's minimum ack timeout is 10 s.
    consumer = client.subscribe(topic, "ackto", consumer_type=pulsar.ConsumerType.Shared,
                                unacked_messages_timeout_ms=10_000)
    _produce(client, topic, 1)
    assert consumer.receive(timeout_millis=5000).data() == b"m0"
    again = consumer.receive(timeout_millis=20000)
    assert again.data() == b"m0" and again.redelivery_count() >= 1
    consumer.acknowledge(again)


def test_seek_by_message_id_and_time(client, topic, pulsar):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = []
    for i in range(6):
        ids.append(producer.send(f"s{i}".encode()))
        time.sleep(0.02)
    consumer = client.subscribe(topic, "seek", initial_position=pulsar.InitialPosition.Earliest)
    msgs = receive_all(consumer, 6)
    for m in msgs:
        consumer.acknowledge(m)
    consumer.seek(pulsar.MessageId.earliest)
    time.sleep(0.5)
    assert [m.data() for m in receive_all(consumer, 6)] == [f"s{i}".encode() for i in range(6)]
    consumer.seek(msgs[3].publish_timestamp())
    time.sleep(0.5)
    assert consumer.receive(timeout_millis=5000).data() == b"s3"


def test_reader_from_earliest_and_from_a_message(client, topic, pulsar):
    ids = _produce(client, topic, 5)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(5)] == [f"m{i}".encode() for i in range(5)]
    assert not reader.has_message_available()
    reader.close()
    reader = client.create_reader(topic, ids[1])
    assert reader.read_next(5000).data() == b"m2"
    reader.close()
    inclusive = client.create_reader(topic, ids[1], start_message_id_inclusive=True)
    assert inclusive.read_next(5000).data() == b"m1"
    assert inclusive.has_message_available()


def test_get_last_message_id(client, topic, pulsar):
    ids = _produce(client, topic, 3)
    consumer = client.subscribe(topic, "last")
    last = consumer.get_last_message_id()
    assert (last.ledger_id(), last.entry_id()) == (ids[-1].ledger_id(), ids[-1].entry_id())


def test_unsubscribe_drops_the_cursor(client, topic, pulsar):
    _produce(client, topic, 3)
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    for m in receive_all(consumer, 3):
        consumer.acknowledge(m)
    consumer.unsubscribe()
    consumer = client.subscribe(topic, "gone", initial_position=pulsar.InitialPosition.Earliest)
    assert len(receive_all(consumer, 3)) == 3


def test_delayed_delivery(client, topic, pulsar):
    consumer = client.subscribe(topic, "delay", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    start = time.time()
    producer.send(b"later", deliver_after=timedelta(milliseconds=1500))
    producer.send(b"now")
    assert consumer.receive(timeout_millis=5000).data() == b"now"
    msg = consumer.receive(timeout_millis=5000)
    assert msg.data() == b"later" and time.time() - start >= 1.4


def test_batch_index_acks(client, topic, pulsar):
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=4,
                                      batching_max_publish_delay_ms=100)
    for i in range(4):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    consumer = client.subscribe(topic, "bia", initial_position=pulsar.InitialPosition.Earliest,
                                batch_index_ack_enabled=True)
    msgs = receive_all(consumer, 4)
    assert {m.message_id().entry_id() for m in msgs} == {0}
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])
    consumer.close()
    consumer = client.subscribe(topic, "bia", batch_index_ack_enabled=True)
    # The entry comes again with the acked indexes marked; the client skips them.
    assert sorted(m.data() for m in _drain(consumer, 1500)) == [b"b1", b"b3"]
