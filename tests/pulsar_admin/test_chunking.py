"""Chunked messages: a payload above the max message size round-trips through the official client."""

from __future__ import annotations

import os

from .conftest import rest_path


def test_chunked_message_round_trip(admin, client, topic, pulsar):
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
    big = os.urandom(11 * 1024 * 1024)  # the broker's max message size is 5 MiB: three chunks
    producer.send(big)
    producer.send(b"small")
    msg = consumer.receive(timeout_millis=30000)
    assert msg.data() == big
    consumer.acknowledge(msg)
    after = consumer.receive(timeout_millis=10000)
    assert after.data() == b"small"
    consumer.acknowledge(after)

    internal = admin.ok("GET", rest_path(topic) + "/internalStats")
    assert internal["numberOfEntries"] == 4  # three chunks and the small message, one entry each
    consumer.close()
    # All chunks were acknowledged: nothing comes back to a new consumer.
    consumer = client.subscribe(topic, "s")
    try:
        extra = consumer.receive(timeout_millis=1000)
        raise AssertionError(f"redelivered {len(extra.data())} bytes")
    except pulsar.Timeout:
        pass


def test_consecutive_chunked_messages_named_producer(client, topic):
    """Every chunk carries the same sequence id: the chunks after the first are not duplicates."""
    producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False,
                                      producer_name=f"chunky-{topic[-6:]}")
    reader = client.create_reader(topic, __import__("pulsar").MessageId.earliest)
    payloads = [os.urandom(6 * 1024 * 1024) for _ in range(2)]
    for p in payloads:
        producer.send(p)
    assert [reader.read_next(timeout_millis=30000).data() for _ in range(2)] == payloads
