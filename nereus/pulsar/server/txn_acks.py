"""Transactional ACKs (CommandAck with a TxnID): held as pending acks until the transaction ends.

The acknowledged records stay unacknowledged on the cursor but are neither
redelivered nor dispatched again while the transaction is open (pending_acks.py).
A record already held by another open transaction is a TransactionConflict, as in
Pulsar. The subscription is added to the transaction if the client did not (the
coordinator must know it to complete it). Answered with ACK_RESPONSE.
"""

from __future__ import annotations

import logging

from ...transactions import errors as txn_errors
from ...transactions.records import TxnState
from ...codec.pulsar import pb, wrap
from . import pending_acks, positions
from .transactions import TC_COUNT, error_code, not_owner, txn_key

log = logging.getLogger(__name__)

_Ack = pb.CommandAck


class AckRefused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def is_transactional(cmd: pb.CommandAck) -> bool:
    return cmd.HasField("txnid_least_bits") or cmd.HasField("txnid_most_bits")


async def handle_txn_ack(conn, consumer, cmd: pb.CommandAck) -> None:
    most, pid = cmd.txnid_most_bits, cmd.txnid_least_bits
    response = pb.CommandAckResponse(consumer_id=cmd.consumer_id, txnid_most_bits=most, txnid_least_bits=pid)
    if cmd.HasField("request_id"):
        response.request_id = cmd.request_id
    try:
        await _hold(conn, consumer, cmd, most, pid)
    except AckRefused as exc:
        response.error, response.message = exc.code, str(exc)
    except txn_errors.TransactionError as exc:
        response.error, response.message = error_code(exc), str(exc)
    conn.send(wrap(response))


async def _hold(conn, consumer, cmd: pb.CommandAck, most: int, pid: int) -> None:
    coordinator = getattr(conn.service, "transactions", None)
    if coordinator is None:
        raise AckRefused(pb.TransactionCoordinatorNotFound, "transactions are not enabled on this broker")
    if not consumer.topic.persistent:
        raise AckRefused(pb.NotAllowedError, "transactional acks need a persistent topic")
    record = await coordinator.find_by_pid(pid) if most < TC_COUNT else None
    if record is None or record.key != txn_key(most, pid):
        raise AckRefused(pb.TransactionNotFound, f"transaction ({most},{pid}) not found")
    refused = await not_owner(conn, coordinator, record.key)
    if refused is not None:
        raise AckRefused(pb.AuthorizationError, refused)
    if record.state != TxnState.ONGOING and record.state != TxnState.EMPTY:
        raise AckRefused(pb.InvalidTxnStatus, f"transaction ({most},{pid}) is {record.state.value}")
    topic, dispatcher = consumer.topic, consumer.dispatcher
    sub = dispatcher.sub
    entry = (str(topic.name), sub.name)
    if [*entry] not in [list(s) for s in record.subscriptions]:
        await coordinator.add_subscriptions(record.key, pid, 0, [entry])
    items = await _items(consumer, cmd)
    held = dispatcher.txn_acks
    for _, _, start, end in items:
        other = held.holder(start, end, other_than=pid)
        if other is not None:
            raise AckRefused(pb.TransactionConflict,
                             f"a record of [{start}, {end}) is acknowledged in open transaction {other}")
    if not items:
        return
    await pending_acks.store(conn.service.meta, topic.stream_id, sub.name, pid, items)
    held.add(pid, items)
    for base, p in list(sub.pending.items()):
        if pending_acks.settled(sub, held, base, p.count):
            sub.release(base)
    dispatcher.wake()


async def _items(consumer, cmd: pb.CommandAck) -> list[list[int]]:
    """[base, count, start, end] of every entry part the ACK names that is not acknowledged yet
    (base -1 for the runs of a cumulative ack, which may span entries)."""
    sub = consumer.sub
    acks = sub.cursor.acks
    items = []
    for m in cmd.message_id:
        base = m.entryId
        if base >= 1 << 63:
            continue
        size = sub.entry_size(base) or await positions.entry_at(consumer.topic, base)
        if size is None:
            continue
        if cmd.ack_type == _Ack.Cumulative:
            start = acks.acked_below
            end = base + size if not m.ack_set else base
            offsets = range(start, end)
        elif m.ack_set:
            count = min(size, 64 * len(m.ack_set))
            offsets = [base + i for i in range(count) if not (m.ack_set[i // 64] >> (i % 64)) & 1]
        else:
            offsets = range(base, base + size)
        cumulative = cmd.ack_type == _Ack.Cumulative
        for start, end in _runs(o for o in offsets if not acks.is_acked(o)):
            items.append([-1, 0, start, end] if cumulative else [base, size, start, end])
    return items


def _runs(offsets):
    """Consecutive runs of increasing offsets as [start, end) pairs."""
    runs: list[tuple[int, int]] = []
    for o in offsets:
        if runs and runs[-1][1] == o:
            runs[-1] = (runs[-1][0], o + 1)
        else:
            runs.append((o, o + 1))
    return runs


__all__ = ["handle_txn_ack", "is_transactional"]
