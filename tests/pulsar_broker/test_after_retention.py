"""Readers and consumers of a topic whose oldest messages retention removed, with the official client."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.pulsar_admin.conftest import Admin

from .conftest import assert_no_more, receive_all


def _trim_until(admin: Admin, topic: str, start: int) -> None:
    path = "/persistent/" + topic[len("persistent://"):]
    deadline = time.monotonic() + 30
    while admin.ok("GET", path + "/internalStats")["startOffset"] < start:
        assert time.monotonic() < deadline, "retention did not trim the topic"
        admin.ok("POST", path + "/trim")
        time.sleep(0.1)


@pytest.fixture
def half_trimmed(standalone, make_client, pulsar):
    """m0..m9 written; a durable subscription acknowledged m0..m4, which retention then removed."""
    ns = f"public/ret-{uuid.uuid4().hex[:6]}"
    admin = Admin(standalone.http)
    admin.ok("PUT", f"/namespaces/{ns}")
    topic = f"persistent://{ns}/t"
    client = make_client(standalone.url)
    holder = client.subscribe(topic, "holder", initial_position=pulsar.InitialPosition.Earliest)
    # Reads before the trim and continues after it (a small queue: little is prefetched).
    early = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=1)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(b"m%d" % i)
    received = receive_all(holder, 10)
    assert [early.read_next(timeout_millis=10000).data() for _ in range(2)] == [b"m0", b"m1"]
    holder.acknowledge_cumulative(received[4])
    admin.ok("POST", f"/namespaces/{ns}/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
    _trim_until(admin, topic, 5)
    return client, topic, holder, early, received, producer


def test_a_reader_from_earliest_starts_at_the_first_surviving_message(half_trimmed, pulsar):
    client, topic, *_ = half_trimmed
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.has_message_available()
    assert [reader.read_next(timeout_millis=10000).data() for _ in range(5)] == [b"m%d" % i for i in range(5, 10)]
    assert not reader.has_message_available()


def test_a_reader_started_at_a_trimmed_id_starts_at_the_earliest_available(half_trimmed, pulsar):
    client, topic, _holder, _early, received, _producer = half_trimmed
    reader = client.create_reader(topic, received[2].message_id())
    assert reader.read_next(timeout_millis=10000).data() == b"m5"


def test_a_reader_whose_position_was_trimmed_moves_on_to_what_survives(half_trimmed):
    _client, _topic, _holder, early, _received, _producer = half_trimmed
    assert early.has_message_available()
    rest = []
    while early.has_message_available():
        rest.append(early.read_next(timeout_millis=10000).data())
    # What the client had prefetched before the trim is delivered, then the survivors.
    assert rest[-5:] == [b"m%d" % i for i in range(5, 10)]
    assert rest[:-5] == [b"m%d" % i for i in range(2, 2 + len(rest) - 5)] and len(rest) - 5 <= 2


def test_a_new_subscription_from_earliest_and_a_seek_to_a_trimmed_id(half_trimmed, pulsar):
    client, topic, holder, _early, received, _producer = half_trimmed
    late = client.subscribe(topic, "late", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_all(late, 5)] == [b"m%d" % i for i in range(5, 10)]
    assert_no_more(late, pulsar)
    holder.seek(received[1].message_id())
    assert holder.receive(timeout_millis=10000).data() == b"m5"


def test_everything_trimmed_then_new_messages(half_trimmed, standalone, pulsar):
    client, topic, holder, _early, received, producer = half_trimmed
    holder.acknowledge_cumulative(received[9])
    _trim_until(Admin(standalone.http), topic, 10)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()
    holder.seek(received[0].message_id())  # everything is gone: it waits for what comes
    consumer = client.subscribe(topic, "from-nothing", initial_position=pulsar.InitialPosition.Earliest)
    assert_no_more(consumer, pulsar)
    producer.send(b"new")
    assert reader.has_message_available()
    assert reader.read_next(timeout_millis=10000).data() == b"new"
    assert consumer.receive(timeout_millis=10000).data() == b"new"
    assert holder.receive(timeout_millis=10000).data() == b"new"
