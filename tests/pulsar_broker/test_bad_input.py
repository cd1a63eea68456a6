"""Malformed input: errors or closed connections, never a dead server or corrupt data."""

from __future__ import annotations

import struct

from nereus.codec.pulsar import pb, wrap

from .conftest import receive_all
from .rawclient import RawClient


def _still_serves(standalone, client, topic, pulsar, expected):
    consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_all(consumer, len(expected))] == expected
    assert standalone.alive()


def test_bad_checksum_gets_a_checksum_send_error(standalone, client, topic, pulsar):
    raw = RawClient(standalone.pulsar_port)
    raw.connect()
    raw.producer(topic)
    raw.send_message(1, 0, b"broken", corrupt=True)
    error = raw.expect("SEND_ERROR")
    assert (error.sequence_id, error.error) == (0, pb.ChecksumError)
    raw.send_message(1, 1, b"fine")
    receipt = raw.expect("SEND_RECEIPT")
    assert receipt.sequence_id == 1 and receipt.message_id.entryId == 0
    raw.close()
    _still_serves(standalone, client, topic, pulsar, [b"fine"])


def test_duplicate_sequence_id_is_not_stored_twice(standalone, client, topic, pulsar):
    raw = RawClient(standalone.pulsar_port)
    raw.connect()
    raw.producer(topic, name="dup-producer")
    raw.send_message(1, 0, b"once")
    assert raw.expect("SEND_RECEIPT").message_id.entryId == 0
    raw.send_message(1, 0, b"once")  # a resend after a lost receipt
    dup = raw.expect("SEND_RECEIPT")
    assert dup.sequence_id == 0 and dup.message_id.entryId == (1 << 64) - 1  # Pulsar answers -1:-1
    raw.send_message(1, 1, b"twice")
    assert raw.expect("SEND_RECEIPT").message_id.entryId == 1
    raw.close()
    _still_serves(standalone, client, topic, pulsar, [b"once", b"twice"])


def test_garbage_and_oversized_frames_close_the_connection(standalone, client, topic, pulsar):
    cases = [
        struct.pack(">II", 12, 8) + b"\xff" * 8,  # undecodable BaseCommand
        struct.pack(">I", 3) + b"abc",  # impossible frame length
        struct.pack(">I", 200 * 1024 * 1024) + b"x" * 16,  # far above the maximum frame size
    ]
    for data in cases:
        raw = RawClient(standalone.pulsar_port)
        raw.connect()
        raw.send_raw(data)
        assert raw.closed_by_server()
        raw.close()
    _still_serves(standalone, client, topic, pulsar, [])


def test_commands_out_of_order(standalone, client, topic, pulsar):
    raw = RawClient(standalone.pulsar_port)  # a command before CONNECT
    raw.send(wrap(pb.CommandLookupTopic(topic=topic, request_id=1)))
    assert raw.closed_by_server()
    raw = RawClient(standalone.pulsar_port)  # SEND for a producer that was never created
    raw.connect()
    raw.send_message(7, 0, b"nobody")
    assert raw.closed_by_server()
    raw = RawClient(standalone.pulsar_port)  # an invalid topic name gets an error, the connection stays
    raw.connect()
    raw.send(wrap(pb.CommandProducer(topic="persistent://only-two/parts", producer_id=1, request_id=5)))
    error = raw.expect("ERROR")
    assert (error.request_id, error.error) == (5, pb.InvalidTopicName)
    raw.send(wrap(pb.CommandPing()))
    raw.expect("PONG")
    raw.close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"after")
    _still_serves(standalone, client, topic, pulsar, [b"after"])


def test_a_batch_claiming_more_messages_than_its_bytes_hold_is_refused(standalone, client, topic, pulsar):
    """The count becomes offsets and consumer-side lists: 2**31-1 messages in 5 bytes is refused."""
    for count in (2**31 - 1, 0, -5):
        raw = RawClient(standalone.pulsar_port)
        raw.connect()
        raw.producer(topic)
        raw.send_message(1, 0, b"xxxxx", batch_count=count)
        assert raw.closed_by_server()
        raw.close()
    _still_serves(standalone, client, topic, pulsar, [])


def test_acks_with_a_client_batch_size_cover_only_stored_records(standalone, make_client, topic, pulsar):
    """batch_size and ack_set come from the client: they may not ack what was never delivered."""
    client = make_client(standalone.url)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"m%d" % i)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    first = consumer.receive(timeout_millis=10000)
    assert first.data() == b"m0"
    raw = RawClient(standalone.pulsar_port)
    raw.connect()
    raw.send(wrap(pb.CommandSubscribe(topic=topic, subscription="s2", subType=pb.CommandSubscribe.Shared,
                                      consumer_id=7, request_id=1,
                                      initialPosition=pb.CommandSubscribe.Earliest)))
    raw.expect("SUCCESS")
    ledger = first.message_id().ledger_id()
    for ack in (pb.MessageIdData(ledgerId=ledger, entryId=0, batch_size=2**31 - 1),
                pb.MessageIdData(ledgerId=ledger, entryId=1, batch_size=2**31 - 1, ack_set=[0] * 100_000),
                pb.MessageIdData(ledgerId=ledger, entryId=10**12)):
        raw.send(wrap(pb.CommandAck(consumer_id=7, ack_type=pb.CommandAck.Individual, message_id=[ack],
                                    request_id=2)))
        raw.expect("ACK_RESPONSE")
    raw.close()
    stats = make_client(standalone.url)  # the subscription still holds m2..m4 (only m0, m1 acked)
    again = stats.subscribe(topic, "s2", consumer_type=pulsar.ConsumerType.Shared)
    assert sorted(m.data() for m in receive_all(again, 3)) == [b"m2", b"m3", b"m4"]
    assert standalone.alive()
