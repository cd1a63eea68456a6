"""Produce and consume with the official client against a real standalone."""

from __future__ import annotations

import pytest

from .conftest import assert_no_more, receive_all


def test_produce_then_consume_earliest(client, topic, pulsar):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}) for i in range(10)]
    # Offsets count records: entry ids are 0..9, all on the topic's stream.
    assert [m.entry_id() for m in ids] == list(range(10))
    assert len({m.ledger_id() for m in ids}) == 1
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    msgs = receive_all(consumer, 10)
    assert [m.data() for m in msgs] == [f"m{i}".encode() for i in range(10)]
    assert [m.properties()["i"] for m in msgs] == [str(i) for i in range(10)]
    assert [m.message_id().entry_id() for m in msgs] == list(range(10))
    for m in msgs:
        consumer.acknowledge(m)
    assert_no_more(consumer, pulsar)
    consumer.close()
    producer.close()


def test_batched_and_compressed_entries_pass_through(client, topic, pulsar):
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=5,
                                      batching_max_publish_delay_ms=50, compression_type=pulsar.CompressionType.LZ4)
    for i in range(10):
        producer.send_async(f"b{i}".encode() * 20, None)
    producer.flush()
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    msgs = receive_all(consumer, 10)
    assert [m.data() for m in msgs] == [f"b{i}".encode() * 20 for i in range(10)]
    ids = [m.message_id() for m in msgs]
    # Two entries of five records: entry ids are the offsets of their first record.
    assert [(i.entry_id(), i.batch_index()) for i in ids] == [(0, b) for b in range(5)] + [(5, b) for b in range(5)]
    for m in msgs:
        consumer.acknowledge(m)
    consumer.close()
    # A new subscription from the earliest position sees the same bytes again.
    again = client.subscribe(topic, "sub2", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_all(again, 10)] == [m.data() for m in msgs]


def test_latest_position_skips_existing_messages(client, topic, pulsar):
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"old")
    consumer = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Latest)
    producer.send(b"new")
    assert consumer.receive(timeout_millis=10000).data() == b"new"
    assert_no_more(consumer, pulsar)


def test_acks_survive_resubscribe(client, topic, pulsar):
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(6):
        producer.send(f"a{i}".encode())
    consumer = client.subscribe(topic, "acks", initial_position=pulsar.InitialPosition.Earliest)
    msgs = receive_all(consumer, 6)
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[3])
    consumer.close()
    consumer = client.subscribe(topic, "acks")
    got = [m.data() for m in receive_all(consumer, 4)]
    assert got == [b"a1", b"a2", b"a4", b"a5"]
    consumer.close()


def test_cumulative_ack(client, topic, pulsar):
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"c{i}".encode())
    consumer = client.subscribe(topic, "cum", initial_position=pulsar.InitialPosition.Earliest)
    msgs = receive_all(consumer, 5)
    consumer.acknowledge_cumulative(msgs[2])
    consumer.close()
    consumer = client.subscribe(topic, "cum")
    assert [m.data() for m in receive_all(consumer, 2)] == [b"c3", b"c4"]
    assert_no_more(consumer, pulsar)


def test_producer_names_and_sequence_ids(client, topic, pulsar):
    anonymous = client.create_producer(topic)
    assert anonymous.producer_name().startswith("nereus-")
    named = client.create_producer(topic, producer_name="p-fixed", batching_enabled=False)
    for _ in range(3):
        named.send(b"x")
    named.close()
    # The broker remembers the last sequence id of a named producer.
    again = client.create_producer(topic, producer_name="p-fixed", batching_enabled=False)
    assert again.last_sequence_id() == 2
    again.send(b"y")
    assert again.last_sequence_id() == 3


def test_exclusive_producer_access(client, topic, pulsar):
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.close()
    client.create_producer(topic).close()
