"""What an aborted transactional ACK redelivers, against a real standalone process.

Pulsar's behaviour (apache/pulsar broker, facts only):

- ``PersistentSubscription.endTxn`` on ABORT passes the pending-ack handle the active
  consumer when the dispatcher is a single-active one (Exclusive/Failover), else none.
- ``PendingAckHandleImpl.internalAbortTxn``: an aborted cumulative ack is dropped and
  ``redeliverUnacknowledgedMessages(consumer)`` is called on the subscription; an aborted
  individual ack calls ``redeliverUnacknowledgedMessages(consumer, positions)`` with the
  transaction's own positions.
- ``PersistentDispatcherSingleActiveConsumer`` answers both by rewinding the cursor to
  the mark-delete position (the positions are not replayed alone "to preserve ordering"),
  so every unacknowledged message goes to the active consumer again, in order, including
  messages still in flight that the aborted transaction never acknowledged.
- The multi-consumer (Shared) dispatcher replays only the given positions (checked in
  test_pulsar_transactions.py); Pulsar refuses cumulative acks on Shared subscriptions.
- A committed cumulative ack acknowledges cumulatively: the mark-delete position moves.

The official Python client has no transaction API, so the codec-built TxnClient drives it.
"""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest

from nereus.codec.pulsar import pb
from tests.waiting import wait_until

SINGLE_ACTIVE = [pb.CommandSubscribe.Exclusive, pb.CommandSubscribe.Failover]


def _consumer_with_in_flight(txn, sub_type: int, count: int):
    topic = f"persistent://public/default/txnack-{uuid.uuid4().hex[:10]}"
    producer = txn.create_producer(topic)
    for i in range(count):
        producer.send(f"m{i}".encode())
    consumer = txn.subscribe(topic, "s", sub_type)
    got = [consumer.receive() for _ in range(count)]
    assert [p for _, p in got] == [f"m{i}".encode() for i in range(count)]
    return topic, consumer, [message_id for message_id, _ in got]


def _payloads(consumer, count: int) -> list[bytes]:
    got = [consumer.receive() for _ in range(count)]
    assert None not in got, f"fewer than {count} messages: {got}"
    return [p for _, p in got]


def _mark_delete(standalone, topic: str) -> str:
    rest = topic.split("://", 1)[1]
    with urllib.request.urlopen(f"{standalone.http}/admin/v2/persistent/{rest}/internalStats", timeout=5) as r:
        return json.loads(r.read())["cursors"]["s"]["markDeletePosition"]


@pytest.mark.parametrize("sub_type", SINGLE_ACTIVE, ids=["exclusive", "failover"])
def test_aborted_cumulative_ack_rewinds_and_a_committed_one_moves_the_mark_delete(standalone, txn, sub_type):
    topic, consumer, ids = _consumer_with_in_flight(txn, sub_type, 5)
    aborted = txn.new_txn()
    consumer.ack(ids[1], aborted, cumulative=True)  # holds m0 and m1; m2..m4 stay in flight
    assert consumer.receive(timeout=0.5) is None
    txn.end_txn(aborted, commit=False)
    # Every unacknowledged message again, in order: not only m0 and m1.
    assert _payloads(consumer, 5) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    assert consumer.receive(timeout=0.5) is None

    committed = txn.new_txn()
    consumer.ack(ids[1], committed, cumulative=True)
    before = _mark_delete(standalone, topic)
    txn.end_txn(committed, commit=True)
    wanted = f"{ids[1].ledgerId}:{ids[1].entryId}"
    assert before != wanted
    wait_until(lambda: _mark_delete(standalone, topic) == wanted, what="the mark-delete at m1 after the commit")
    consumer.redeliver_unacked()  # acknowledged for good: only m2..m4 come back
    assert _payloads(consumer, 3) == [b"m2", b"m3", b"m4"]
    assert consumer.receive(timeout=0.5) is None


def test_aborted_individual_ack_on_exclusive_rewinds_in_order(standalone, txn):
    _, consumer, ids = _consumer_with_in_flight(txn, pb.CommandSubscribe.Exclusive, 3)
    consumer.ack(ids[0])  # acknowledged outside the transaction: never again
    aborted = txn.new_txn()
    consumer.ack(ids[2], aborted)
    txn.end_txn(aborted, commit=False)
    assert _payloads(consumer, 2) == [b"m1", b"m2"]
    assert consumer.receive(timeout=0.5) is None
