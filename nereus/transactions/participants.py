"""Who completes a transaction's parts: markers in partitions, offsets of groups, acks of subscriptions.

The coordinator never touches a stream itself: it calls a ``Participants``. The
broker's implementation (``BrokerParticipants``) writes the markers through the
topic registry; the Kafka layer registers the completer of group offsets and the
Pulsar layer the completer of subscription acks. Every ``complete_*`` is idempotent:
recovery may call it again after a crash at any point.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
import weakref
from typing import Awaitable, Callable, Protocol

from ..codec.kafka.records import Record, build_batch
from ..ledger.entry import EntryFlags, EntryFormat, EntryHeader
from ..ledger.naming import TopicName
from ..topics.placement import NotOwner
from .errors import MarkerNotWritten
from .stream_index import StreamTransactions, same_transaction

log = logging.getLogger(__name__)

ABORT, COMMIT = 0, 1  # Kafka's control record types
MARKER_FLAGS = EntryFlags.TRANSACTIONAL | EntryFlags.CONTROL | EntryFlags.BATCHED

GroupCompleter = Callable[[str, int, int, bool, int], Awaitable[None]]
SubscriptionCompleter = Callable[[str, str, int, bool], Awaitable[None]]
RemoteMarkerWriter = Callable[[object, str, int, int, bool, int], Awaitable[None]]


class Participants(Protocol):
    """Each ``complete_*`` of a Kafka transaction takes its ``sequence`` (``TxnRecord.sequence``;
    0: whichever is open) and leaves what another transaction of the same producer holds."""

    async def complete_partition(self, partition: str, pid: int, epoch: int, commit: bool, *,
                                 sequence: int = 0) -> None:
        """Write the COMMIT/ABORT marker of ``pid`` into the partition and update its index."""

    async def complete_group(self, group: str, pid: int, epoch: int, commit: bool, *, sequence: int = 0) -> None:
        """Make the group offsets ``pid`` committed in the transaction visible, or drop them."""

    async def complete_subscription(self, topic: str, sub: str, pid: int, commit: bool) -> None:
        """Apply the subscription's pending acks of ``pid`` to its cursor, or drop them."""


def control_batch(pid: int, epoch: int, commit: bool, *, timestamp_ms: int, coordinator_epoch: int = 0) -> bytes:
    """A Kafka control batch (magic v2) holding one COMMIT or ABORT marker record."""
    record = Record(0, timestamp_ms, struct.pack(">hh", 0, COMMIT if commit else ABORT),
                    struct.pack(">hi", 0, coordinator_epoch))
    return build_batch([record], producer_id=pid, producer_epoch=epoch, control=True)


def marker_entry(pid: int, epoch: int, commit: bool, *, timestamp_ms: int) -> bytes:
    """The stored entry of a marker: the control batch behind a KAFKA entry header."""
    header = EntryHeader(EntryFormat.KAFKA, 1, first_timestamp=timestamp_ms, max_timestamp=timestamp_ms,
                         producer_id=pid, producer_epoch=epoch, flags=MARKER_FLAGS)
    return header.pack() + control_batch(pid, epoch, commit, timestamp_ms=timestamp_ms)


class BrokerParticipants:
    """The broker's participants: markers through the topic registry, groups and subscriptions by hooks."""

    def __init__(self, registry, stream_txns: StreamTransactions, *, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self.stream_txns = stream_txns
        self.clock = clock
        self._group_completer: GroupCompleter | None = None
        self._subscription_completer: SubscriptionCompleter | None = None
        self._remote_writer: RemoteMarkerWriter | None = None
        self._marker_listeners: list[Callable[[object, int], None]] = []
        # One marker write per (partition, pid) at a time; a lock lives while someone holds it.
        self._locks: weakref.WeakValueDictionary[tuple[str, int], asyncio.Lock] = weakref.WeakValueDictionary()
        self.markers_written = 0  # observability, tests
        self.markers_forwarded = 0  # written by the partition's owner on this broker's request

    def register_group_completer(self, completer: GroupCompleter) -> None:
        """``completer(group, pid, epoch, commit, sequence)``: the Kafka layer's TxnOffsetCommit outcome."""
        self._group_completer = completer

    def register_subscription_completer(self, completer: SubscriptionCompleter) -> None:
        """``completer(topic, subscription, pid, commit)``: the Pulsar layer's pending acks outcome."""
        self._subscription_completer = completer

    def register_remote_marker_writer(self, writer: RemoteMarkerWriter | None) -> None:
        """``writer(owner, partition, pid, epoch, commit, sequence)``: asks ``owner`` (a BrokerAddress), the broker
        that serves the partition, to write the marker now; raises MarkerNotWritten when it cannot."""
        self._remote_writer = writer

    def add_marker_listener(self, callback: Callable[[object, int], None]) -> None:
        """``callback(topic, pid)`` just before ``pid``'s marker is appended to ``topic`` (a
        nereus.topics.Topic): a protocol layer that remembers which transactions it checked for
        the partition forgets this one, so a late record of it is checked (and refused) again
        rather than stored behind its marker."""
        self._marker_listeners.append(callback)

    async def complete_partition(self, partition: str, pid: int, epoch: int, commit: bool, *,
                                 sequence: int = 0, forward: bool = True) -> None:
        """Write the marker if ``pid`` has transaction ``sequence`` open in the partition's stream, then
        close it there. A marker that comes late (a retried or recovered completion of a transaction
        that ended) finds another transaction open, or none, and writes nothing.

        When another broker owns the partition (its append session is never taken from
        a live owner) the remote marker writer asks that broker to write it; without
        one, or when that fails, raises MarkerNotWritten and the coordinator retries later.
        ``forward=False`` (a request another broker forwarded) never forwards it again.
        """
        name = TopicName.parse(partition)
        key = (str(name), pid)
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        async with lock:
            topic = await self.registry.get(name)
            opened = await self.stream_txns.open_sequence(topic.stream_id, pid)
            if opened is None:
                return  # nothing was written in the transaction, or the marker is already in place
            if not same_transaction(opened, sequence):
                log.info("%s: marker of transaction %d of producer %d left out: transaction %d is open", partition,
                         sequence, pid, opened)
                return
            try:
                await topic.ensure_writer()
            except NotOwner as exc:
                if exc.owner is None or self._remote_writer is None or not forward:
                    raise MarkerNotWritten(f"{partition} is served by another broker: {exc}") from exc
                await self._remote_writer(exc.owner, partition, pid, epoch, commit, sequence)
                self.markers_forwarded += 1
                return
            data = marker_entry(pid, epoch, commit, timestamp_ms=int(self.clock() * 1000))
            for listener in self._marker_listeners:
                listener(topic, pid)
            result = await topic.append(data, 1)
            # Keeps Pulsar's dedup snapshot covering the marker (no replay of it on load).
            topic.dedup.committed("", -1, result.base_offset + 1)
            self.markers_written += 1
            await self.stream_txns.complete(topic.stream_id, pid, commit, result.base_offset, sequence=sequence)
            start = topic.handle.start_offset()
            if not commit and start > 0:  # aborted ranges of trimmed records serve no reader any more
                await self.stream_txns.forget_aborted_before(topic.stream_id, start)

    async def complete_group(self, group: str, pid: int, epoch: int, commit: bool, *, sequence: int = 0) -> None:
        if self._group_completer is None:
            raise MarkerNotWritten(f"no Kafka group completer is registered for group {group!r}")
        await self._group_completer(group, pid, epoch, commit, sequence)

    async def complete_subscription(self, topic: str, sub: str, pid: int, commit: bool) -> None:
        if self._subscription_completer is None:
            raise MarkerNotWritten(f"no Pulsar subscription completer is registered for {topic} {sub!r}")
        await self._subscription_completer(topic, sub, pid, commit)


__all__ = ["ABORT", "BrokerParticipants", "COMMIT", "GroupCompleter", "MARKER_FLAGS", "Participants", "RemoteMarkerWriter",
           "SubscriptionCompleter", "control_batch", "marker_entry"]
