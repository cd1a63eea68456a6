"""Non-persistent topics with the official client: dispatched from memory, never stored, at-most-once."""

from __future__ import annotations

import uuid

import pytest

from tests.pulsar_admin.conftest import Admin

from .conftest import assert_no_more, receive_all


def _object_count(standalone) -> int:
    return sum(1 for p in (standalone.data_dir / "objects").rglob("*") if p.is_file())


def test_produce_and_consume_without_storing_anything(client, standalone, pulsar):
    admin = Admin(standalone.http)
    topic = f"non-persistent://public/default/np-{uuid.uuid4().hex[:8]}"
    streams_before = admin.ok("GET", "/persistent/public/default")
    objects_before = _object_count(standalone)
    first = client.subscribe(topic, "a")
    second = client.subscribe(topic, "b")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(b"m%d" % i)
    for consumer in (first, second):  # each subscription gets its own copy
        got = [m.data() for m in receive_all(consumer, 20)]
        assert got == [b"m%d" % i for i in range(20)]
    assert topic in admin.ok("GET", "/namespaces/public/default/topics?mode=NON_PERSISTENT")
    stats = admin.ok("GET", "/non-persistent/public/default/" + topic.rsplit("/", 1)[1] + "/stats")
    assert stats["msgInCounter"] == 20 and set(stats["subscriptions"]) == {"a", "b"}
    assert admin.ok("GET", "/persistent/public/default") == streams_before
    assert _object_count(standalone) == objects_before

    late = client.subscribe(topic, "late")  # connects afterwards: sees nothing of the past
    assert_no_more(late, pulsar)
    producer.send(b"new")
    assert late.receive(timeout_millis=10000).data() == b"new"


def test_a_consumer_without_permits_drops_messages(client, pulsar):
    topic = f"non-persistent://public/default/np-{uuid.uuid4().hex[:8]}"
    consumer = client.subscribe(topic, "slow", receiver_queue_size=5)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(200):
        producer.send(b"m%d" % i)
    got = []
    while True:
        try:
            got.append(consumer.receive(timeout_millis=500).data())
        except pulsar.Timeout:
            break
    assert 0 < len(got) < 200  # at-most-once: what found no permit was dropped, nothing twice
    assert len(set(got)) == len(got)


def test_non_persistent_topics_of_a_missing_namespace_are_not_found(client, pulsar):
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer("non-persistent://public/nope/t")
