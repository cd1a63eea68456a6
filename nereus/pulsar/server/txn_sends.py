"""Transactional SENDs: checked with the coordinator before a transaction's first append.

A SEND carrying a TxnID is stored flagged TRANSACTIONAL with ``producer_id`` = the
TxnID's least bits. Before the first append of a transaction to a partition the
coordinator confirms the transaction is open and lists the partition
(``verify``), and the stream's transaction index records it open from the current
end (``begin``), which holds the partition's LSO below it until the marker.

Offsets follow call order, so while such a check is in flight every later SEND of
the same producer (transactional or not) waits behind it: ``Producer.gate`` is a
future set once the last waiting SEND's append was issued.
"""

from __future__ import annotations

import asyncio

from ...transactions import errors as txn_errors
from ...codec.pulsar import pb
from .transactions import TC_COUNT


class TxnSendRefused(Exception):
    """The SEND names a transaction that is not open for this partition (the client fails the message)."""

    server_error = pb.NotAllowedError


def txn_of(cmd: pb.CommandSend, meta: pb.MessageMetadata) -> tuple[int, int] | None:
    """(most, least) bits of the SEND's TxnID, or None outside a transaction."""
    if cmd.HasField("txnid_least_bits") or cmd.HasField("txnid_most_bits"):
        return cmd.txnid_most_bits, cmd.txnid_least_bits
    if meta.HasField("txnid_least_bits") or meta.HasField("txnid_most_bits"):
        return meta.txnid_most_bits, meta.txnid_least_bits
    return None


def append(producer, data: bytes, count: int, txn: tuple[int, int] | None) -> asyncio.Future:
    """Append now, or after the checks in flight (and this SEND's own) when there are any."""
    topic = producer.topic
    previous = producer.gate if producer.gate is not None and not producer.gate.done() else None
    check = txn is not None and txn[1] not in topic.txn_begun
    if previous is None and not check:
        return topic.append(data, count)
    issued = asyncio.get_running_loop().create_future()
    producer.gate = issued
    return asyncio.ensure_future(_append_later(topic, data, count, previous, txn if check else None, issued))


async def _append_later(topic, data: bytes, count: int, previous: asyncio.Future | None,
                        txn: tuple[int, int] | None, issued: asyncio.Future):
    try:
        if previous is not None:
            await previous  # always resolved with None, after that SEND's append was issued
        if txn is not None and txn[1] not in topic.txn_begun:
            await begin(topic, *txn)
        task = topic.append(data, count)
    finally:
        if not issued.done():
            issued.set_result(None)
    return await task


async def begin(topic, most: int, pid: int) -> None:
    """Confirm transaction (most, pid) may write to ``topic`` and mark it open on the stream."""
    service = topic.service
    coordinator = getattr(service, "transactions", None)
    if coordinator is None:
        raise TxnSendRefused("transactions are not enabled on this broker")
    if most >= TC_COUNT:
        raise TxnSendRefused(f"transaction ({most},{pid}) does not exist")
    try:
        await coordinator.verify(pid, 0, str(topic.name))
    except txn_errors.TransactionError as exc:
        raise TxnSendRefused(f"transaction ({most},{pid}) cannot write to {topic.name}: {exc}") from exc
    await service.stream_txns.begin(topic.stream_id, pid, 0, topic.handle.next_offset())
    if not topic.txn_begun:  # the shared empty one
        topic.txn_begun = {}
    topic.txn_begun[pid] = None


__all__ = ["TxnSendRefused", "append", "begin", "txn_of"]
