"""Message deduplication by producer name and sequence id (Pulsar's semantics).

The highest persisted sequence id of each producer name is snapshotted into the
metadata plane every ``SNAPSHOT_EVERY`` entries (``{stream}/pulsar-dedup``: the map
and the offset it covers). On load, and again each time this broker takes the
stream's append session, the entries after what the state covers are replayed
(their stored header carries the sequence ids, the Pulsar metadata the producer
name), so the state always matches the stored stream: after a crash, after another
broker wrote, after a failed append.

The snapshot is written by compare-and-set against the version this broker last
read or wrote: a broker that lost the stream cannot overwrite its successor's.

Whether duplicates are dropped is the namespace policy ``deduplicationEnabled``
(always, for the producers of other clusters' replicators: ``REPLICATOR_PREFIX``),
read when a topic is loaded and again whenever the policy is changed or removed
through the admin API. Without a policy the broker default
``BROKER_DEDUPLICATION_ENABLED`` applies: True here, where Pulsar's
``brokerDeduplicationEnabled`` defaults to false. With deduplication disabled every
SEND is stored, but the sequence ids are still tracked, so enabling it again takes
effect at once with an accurate state.

Memory: producer names whose last message is older than ``PRODUCER_EXPIRY_MS``
(Pulsar's ``brokerDeduplicationProducerInactivityTimeoutMinutes``, 6 h) are dropped
at the next snapshot, and at most ``MAX_PRODUCERS`` names are kept per topic.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from types import MappingProxyType
from typing import Callable, Mapping

from ..ledger.entry import EntryFormat, EntryFormatError, decode_entry
from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ..codec.pulsar import split_entry
from ..codec.pulsar.errors import PulsarCodecError
from ..storage import Stream
from ..storage.records import stream_partition

log = logging.getLogger(__name__)

SNAPSHOT_EVERY = 256
#: Producer names of other clusters' replicators: always deduplicated, whatever the policy,
#: since their resends after a restart or a cut link are expected and must not be stored twice.
REPLICATOR_PREFIX = "pulsar.repl."
# Broker default for namespaces without a deduplication policy (Pulsar: false).
BROKER_DEDUPLICATION_ENABLED = True
PRODUCER_EXPIRY_MS = 6 * 3600 * 1000
MAX_PRODUCERS = 10_000


def snapshot_key(stream_id: int) -> str:
    return f"{stream_partition(stream_id)}/pulsar-dedup"


#: ``Dedup.inflight`` while nothing is in flight (an idle topic keeps no table of its own; read-only).
NOTHING_IN_FLIGHT: Mapping = MappingProxyType({})

class Dedup:
    """Per-topic sequence tracking: persisted (durable) and pushed (accepted) highs."""

    __slots__ = ("meta", "stream_id", "enabled", "persisted", "pushed", "last_seen", "inflight", "_clock", "_covered",
                 "_since_snapshot", "_snapshot_version", "_snapshotting")  # one per loaded topic

    def __init__(self, meta: MetadataStore, stream_id: int, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.meta = meta
        self.stream_id = stream_id
        self.enabled = BROKER_DEDUPLICATION_ENABLED
        self.persisted: dict[str, int] = {}
        self.pushed: dict[str, int] = {}
        self.last_seen: dict[str, int] = {}  # producer name -> ms of its last stored entry
        # (producer name, sequence id) -> the append task in flight (its result has the base offset)
        self.inflight: Mapping[tuple[str, int], asyncio.Future] = NOTHING_IN_FLIGHT  # a dict while any is
        self._clock = clock
        self._covered = -1  # offset the persisted map is complete up to (-1: not restored)
        self._since_snapshot = 0
        self._snapshot_version: int | None = None  # EXPECT_ABSENT once known absent
        self._snapshotting: asyncio.Task | None = None

    async def restore(self, handle: Stream, *, current: bool = False) -> None:
        """Bring the state up to the stream's committed end (snapshot, then replay); ``current``:
        the handle's start and end were just read (a session just taken), not read again."""
        reads = [] if current else [handle.refresh()]
        if self._covered < 0:
            snapshot = (self.meta.get(snapshot_key(self.stream_id), partition_key=stream_partition(self.stream_id))
                        if not handle.created else _nothing())
            rec, *_ = await asyncio.gather(snapshot, *reads)
            self._covered = 0
            self._snapshot_version = EXPECT_ABSENT
            if rec is not None:
                value = json.loads(rec.value)
                self.persisted = dict(value["seq"])
                self.last_seen = dict(value.get("seen", {}))
                self._covered = value["offset"]
                self._snapshot_version = rec.version.version_id
        elif reads:
            await reads[0]
        offset = max(self._covered, handle.start_offset())
        end = handle.next_offset()
        replayed = 0
        while offset < end:
            result = await handle.fetch(offset, end, max_bytes=4 << 20)
            if not result.entries:
                break
            for fetched in result.entries:
                if fetched.base_offset >= offset:
                    self._replay(fetched.data)
                    replayed += 1
            offset = result.entries[-1].end_offset
        self.pushed = dict(self.persisted)
        self._covered = max(self._covered, end)
        if replayed:
            log.info("stream %d: dedup state brought up to offset %d, %d entries replayed", self.stream_id, end,
                     replayed)

    def _replay(self, data) -> None:
        try:
            header, body = decode_entry(data)
        except EntryFormatError:
            return  # not an entry of a protocol: nothing to deduplicate against
        if header.format != EntryFormat.PULSAR or header.last_sequence < 0:
            return
        try:
            meta, _ = split_entry(body)
        except PulsarCodecError:
            return
        name = meta.producer_name
        if name:
            self.persisted[name] = max(self.persisted.get(name, -1), header.last_sequence)
            self.last_seen[name] = max(self.last_seen.get(name, 0), meta.publish_time)

    def last_sequence(self, name: str) -> int:
        """What PRODUCER_SUCCESS reports: -1 while deduplication is disabled, as Pulsar does."""
        return self.persisted.get(name, -1) if self.enabled or name.startswith(REPLICATOR_PREFIX) else -1

    def is_duplicate(self, name: str, sequence: int) -> bool:
        return (self.enabled or name.startswith(REPLICATOR_PREFIX)) and sequence <= self.pushed.get(name, -1)

    def accept(self, name: str, highest: int) -> None:
        if highest > self.pushed.get(name, -1):
            self.pushed[name] = highest

    def committed(self, name: str, highest: int, end_offset: int) -> None:
        """An entry ending at ``end_offset`` is durable (called in offset order)."""
        if name and highest > self.persisted.get(name, -1):
            self.persisted[name] = highest
        if name:
            self.last_seen[name] = int(self._clock() * 1000)
        self._covered = max(self._covered, end_offset)
        self._since_snapshot += 1
        if self._since_snapshot >= SNAPSHOT_EVERY and self._snapshotting is None:
            self._snapshotting = asyncio.ensure_future(self._snapshot_bg())

    def failed(self, name: str) -> None:
        """An append failed: later sends of the same sequence ids must be accepted again."""
        self.pushed[name] = self.persisted.get(name, -1)

    def expire(self) -> int:
        """Forget producers inactive for ``PRODUCER_EXPIRY_MS`` (and the oldest past the cap)."""
        now = int(self._clock() * 1000)
        names = [n for n in self.persisted if now - self.last_seen.get(n, now) >= PRODUCER_EXPIRY_MS
                 and not any(k[0] == n for k in self.inflight)]
        overflow = len(self.persisted) - len(names) - MAX_PRODUCERS
        if overflow > 0:
            by_age = sorted((self.last_seen.get(n, 0), n) for n in self.persisted if n not in set(names))
            names += [n for _, n in by_age[:overflow]]
        for name in names:
            self.persisted.pop(name, None)
            self.pushed.pop(name, None)
            self.last_seen.pop(name, None)
        return len(names)

    async def _snapshot_bg(self) -> None:
        try:
            await self.snapshot()
        except Exception:
            log.exception("stream %d: dedup snapshot failed", self.stream_id)
        finally:
            self._snapshotting = None

    async def snapshot(self) -> None:
        """Persist the state (CAS on the version this broker knows; a lost race is skipped)."""
        if self._since_snapshot == 0 or self._covered < 0 or self._snapshot_version is None:
            return
        self._since_snapshot = 0
        self.expire()
        value = json.dumps({"offset": self._covered, "seq": self.persisted, "seen": self.last_seen},
                           separators=(",", ":")).encode()
        try:
            result = await self.meta.put(snapshot_key(self.stream_id), value,
                                         expected_version_id=self._snapshot_version,
                                         partition_key=stream_partition(self.stream_id))
        except UnexpectedVersion:
            # Another broker wrote it: the stream is (or was) someone else's. Its
            # snapshot stands; ours is re-read at the next restore.
            log.info("stream %d: dedup snapshot written elsewhere meanwhile; not overwritten", self.stream_id)
            self._covered, self._snapshot_version = -1, None
            return
        self._snapshot_version = result.version.version_id


async def _nothing() -> None:
    """No record: the snapshot of a stream created just now."""


__all__ = ["BROKER_DEDUPLICATION_ENABLED", "Dedup", "NOTHING_IN_FLIGHT", "snapshot_key"]
