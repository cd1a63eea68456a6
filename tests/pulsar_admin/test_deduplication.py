"""The namespace deduplication policy takes effect on loaded topics, with the official client."""

from __future__ import annotations

import uuid

from tests.pulsar_broker.conftest import assert_no_more, receive_all
from tests.pulsar_broker.rawclient import RawClient

from .conftest import rest_path

_NO_ID = (1 << 64) - 1


def _resend(raw: RawClient, seq: int, payload: bytes) -> tuple:
    """Send one message twice with the same sequence id; the two receipts' entry ids."""
    raw.send_message(1, seq, payload)
    first = raw.expect("SEND_RECEIPT")
    raw.send_message(1, seq, payload)  # a resend after a lost receipt
    second = raw.expect("SEND_RECEIPT")
    assert first.sequence_id == second.sequence_id == seq
    return first.message_id.entryId, second.message_id.entryId


def test_policy_switches_deduplication_on_a_loaded_topic(standalone, admin, client, pulsar):
    ns = f"public/dedup-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    topic = f"persistent://{ns}/t"
    consumer = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)

    raw = RawClient(standalone.pulsar_port)
    raw.connect()
    raw.producer(topic, name="resender")

    # No policy: the broker default (enabled) drops the duplicate.
    assert _resend(raw, 0, b"a") == (0, _NO_ID)

    # Disabled on the loaded topic: the duplicate is stored again.
    admin.ok("POST", f"/namespaces/{ns}/deduplication", False)
    assert admin.ok("GET", f"/namespaces/{ns}/deduplication") is False
    assert _resend(raw, 1, b"b") == (1, 2)
    raw.send_message(1, 0, b"old")  # even a sequence id below the last one
    assert raw.expect("SEND_RECEIPT").message_id.entryId == 3

    # Enabled again: sequence ids were still tracked, the duplicate is dropped.
    admin.ok("POST", f"/namespaces/{ns}/deduplication", True)
    assert _resend(raw, 2, b"c") == (4, _NO_ID)

    # Removed: back to the broker default (enabled).
    admin.ok("POST", f"/namespaces/{ns}/deduplication", False)
    assert _resend(raw, 3, b"d") == (5, 6)
    admin.ok("DELETE", f"/namespaces/{ns}/deduplication")
    assert _resend(raw, 4, b"e") == (7, _NO_ID)
    raw.close()

    received = [m.data() for m in receive_all(consumer, 8)]
    assert received == [b"a", b"b", b"b", b"old", b"c", b"d", b"d", b"e"]
    assert_no_more(consumer, pulsar)
    consumer.close()


def test_official_producer_with_deduplication_disabled(standalone, admin, client, pulsar):
    ns = f"public/nodedup-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}", {"deduplicationEnabled": False})
    assert admin.ok("GET", f"/namespaces/{ns}")["deduplicationEnabled"] is False
    topic = f"persistent://{ns}/t"
    admin.ok("PUT", rest_path(topic))
    consumer = client.subscribe(topic, "all", initial_position=pulsar.InitialPosition.Earliest)

    producer = client.create_producer(topic, producer_name="named", batching_enabled=False)
    producer.send(b"x", sequence_id=7)
    producer.send(b"x", sequence_id=7)  # stored twice: no deduplication in this namespace
    producer.close()
    again = client.create_producer(topic, producer_name="named", batching_enabled=False)
    assert again.last_sequence_id() == -1  # as Pulsar reports with deduplication disabled
    again.close()

    admin.ok("POST", f"/namespaces/{ns}/deduplication", True)
    producer = client.create_producer(topic, producer_name="named", batching_enabled=False)
    assert producer.last_sequence_id() == 7
    producer.send(b"y", sequence_id=7)  # acknowledged, not stored
    producer.send(b"z", sequence_id=8)
    producer.close()

    assert [m.data() for m in receive_all(consumer, 3)] == [b"x", b"x", b"z"]
    assert_no_more(consumer, pulsar)
    consumer.close()
