"""Pending acks: what consumers acknowledged inside open transactions.

A transactional ACK does not touch the cursor. Its records are kept per subscription
and transaction in the metadata plane, next to the stream's cursors::

    /nereus/s/{stream:020d}/txn-acks/{quoted subscription}/{pid:020d}
        -> {"entries": [[base, count, start, end], ...]}

and in memory (``PendingAcks``, one per subscription), which the dispatcher consults:
held records are neither redelivered nor dispatched again. When the coordinator ends
the transaction it calls ``complete`` (registered as the participants' subscription
completer): COMMIT acknowledges the records on the cursor, ABORT drops them and the
entries go back for redelivery (on Exclusive/Failover with every other unacknowledged
entry: the subscription rewinds, as Pulsar's does). Both delete the record last, so a
repeated call after a crash does the same again (idempotent).
"""

from __future__ import annotations

import json
import logging
from urllib.parse import quote

from ...ledger.cursor import list_cursors
from ...ledger.naming import TopicName
from ...ledger.subscription import SubType
from ...meta import update
from ...storage.records import stream_partition
from ...topics import NotOwner
from ...transactions import errors as txn_errors

log = logging.getLogger(__name__)

Item = list  # [entry base (-1: a cumulative ack's run), entry record count, first acked offset, end (exclusive)]


def acks_prefix(stream_id: int, sub: str) -> str:
    return f"{stream_partition(stream_id)}/txn-acks/{quote(sub, safe='')}/"


def acks_key(stream_id: int, sub: str, pid: int) -> str:
    return f"{acks_prefix(stream_id, sub)}{pid:020d}"


class PendingAcks:
    """The pending acks of one subscription, by transaction pid."""

    def __init__(self) -> None:
        self.by_pid: dict[int, list[Item]] = {}

    def __bool__(self) -> bool:
        return bool(self.by_pid)

    def holder(self, start: int, end: int, *, other_than: int | None = None) -> int | None:
        """The pid of a transaction holding a record of ``[start, end)``, if any."""
        for pid, items in self.by_pid.items():
            if pid != other_than and any(s < end and start < e for _, _, s, e in items):
                return pid
        return None

    def is_held(self, offset: int) -> bool:
        return any(s <= offset < e for items in self.by_pid.values() for _, _, s, e in items)

    def add(self, pid: int, items: list[Item]) -> None:
        self.by_pid.setdefault(pid, []).extend(items)

    def pop(self, pid: int) -> list[Item]:
        return self.by_pid.pop(pid, [])


def settled(sub, held: PendingAcks, base: int, count: int) -> bool:
    """Every record of the entry is acknowledged on the cursor or held by a transaction."""
    if sub.fully_acked(base, count):
        return True
    if not held or held.holder(base, base + count) is None:
        return False
    acks = sub.cursor.acks
    return all(acks.is_acked(o) or held.is_held(o) for o in range(base, base + count))


async def load(meta, stream_id: int, sub: str) -> PendingAcks:
    """The pending acks of a subscription as stored (after a restart or a topic move)."""
    held = PendingAcks()
    prefix = acks_prefix(stream_id, sub)
    async for rec in meta.range_scan(prefix, prefix + "\U0010ffff", partition_key=stream_partition(stream_id)):
        held.add(int(rec.key.rsplit("/", 1)[1]), json.loads(rec.value)["entries"])
    return held


async def store(meta, stream_id: int, sub: str, pid: int, items: list[Item]) -> None:
    """Add ``items`` to the stored pending acks of ``pid`` on the subscription."""
    def change(old: bytes | None) -> bytes:
        entries = json.loads(old)["entries"] if old else []
        return json.dumps({"entries": entries + items}).encode()

    await update(meta, acks_key(stream_id, sub, pid), change, partition_key=stream_partition(stream_id))


async def forget(meta, stream_id: int, sub: str) -> None:
    """Drop every pending ack of a deleted subscription."""
    prefix = acks_prefix(stream_id, sub)
    await meta.delete_range(prefix, prefix + "\U0010ffff", partition_key=stream_partition(stream_id))


class SubscriptionCompleter:
    """The Pulsar layer's part of ending a transaction: its pending acks, applied or dropped."""

    def __init__(self, service) -> None:
        self.service = service

    async def __call__(self, topic_name: str, sub_name: str, pid: int, commit: bool) -> None:
        service = self.service
        name = TopicName.parse(topic_name)
        try:
            topic = await service.get_topic(name)
        except NotOwner as exc:  # the coordinator retries once the owner is known
            raise txn_errors.MarkerNotWritten(f"{topic_name} is served by another broker: {exc}") from exc
        part = stream_partition(topic.stream_id)
        key = acks_key(topic.stream_id, sub_name, pid)
        rec = await service.meta.get(key, partition_key=part)
        dispatcher = topic.dispatchers.get(sub_name)
        if rec is None:  # done before (or nothing was acknowledged in the transaction)
            if dispatcher is not None:
                dispatcher.txn_acks.pop(pid)
            return
        items = json.loads(rec.value)["entries"]
        if commit and dispatcher is None and sub_name in await list_cursors(service.meta, topic.stream_id):
            dispatcher = await topic.subscription(sub_name, SubType.SHARED, durable=True, initial=0)
        if dispatcher is not None:
            sub = dispatcher.sub
            dispatcher.txn_acks.pop(pid)
            if commit:
                for _, _, start, end in items:
                    sub.cursor.ack(start, end)
                sub.settle_bases(list(sub.pending))
                await sub.cursor.persist()
            elif sub.type in (SubType.EXCLUSIVE, SubType.FAILOVER):
                # As in Pulsar: the subscription hands the abort its single-active
                # dispatcher's active consumer, and redelivery there rewinds the cursor to
                # the mark-delete position rather than replaying single positions (the order
                # must hold). So every unacknowledged message goes out again, including
                # those still in flight that the aborted transaction never acknowledged.
                dispatcher.generation += 1  # a read in progress must not set the position past it
                sub.rewind()
            else:
                for base, count, start, _ in items:
                    if base < 0:  # a cumulative ack's run (Pulsar allows none on Shared)
                        sub.cursor.read_position = min(sub.cursor.read_position, start)
                    elif not sub.fully_acked(base, count) and base not in sub.pending:
                        sub.remember_size(base, count)
                        sub.replay.add(base)
            dispatcher.wake()
        await service.meta.delete(key, expected_version_id=rec.version.version_id, partition_key=part)
        log.debug("%s/%s: pending acks of transaction %d %s", topic_name, sub_name, pid,
                  "applied" if commit else "dropped")


__all__ = ["PendingAcks", "SubscriptionCompleter", "acks_key", "forget", "load", "settled", "store"]
