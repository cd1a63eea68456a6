"""Object reference tracking and garbage collection, driven by metadata only.

Each WAL object has a record ``/nereus/objects/{key}``:

    {"state": "sealed", "live": [[sid, base], ...], "ts": ms}
    {"state": "early", "released": [[sid, base], ...]}   (a release that beat the seal)

Before writing objects, a writer RESERVES a block of object names with one pending
marker ``/nereus/gc/pending/{first name}`` (prefix, first sequence, count), so a
crash at any later point leaves a metadata trace, and no metadata write is needed
per object on the ack path. After each object's commit round the writer seals its
record with the slices that committed; when every name of a closed block is
sealed, the marker is deleted. Releases (trim, stream deletion, compaction) remove
``[sid, base]`` pairs: removing a pair that is not there is a no-op, so a release is
idempotent and a slice can never be counted twice. When ``live`` is empty a free
marker is written; the collector deletes the object once the marker is older than
the grace period (which protects readers that resolved an index entry just before
it was released), then the record.

Compaction (``storage.compaction``) writes a pending marker of kind "compaction"
that describes its change; for a dead compactor the collector either finishes
the change (it landed) or frees the new object (it never became visible). A pin
(``/nereus/gc/pins/{key}/{holder}``: a table listing the object as a data file,
a job reading it) keeps a freed object until it is unpinned or expires.

The collector never lists the object store: it scans the pending and free markers.
A pending marker older than the timeout belongs to a dead (or hopelessly slow)
writer: each unsealed name of its block is resolved from the object's own slice
directory and the offset index (the slices' base-offset hints say where to look).

Resolving is safe even if the writer is only stalled (a long pause, a slow
metadata round trip): the collector first claims the marker by CAS, then makes
every late step of the writer fail before it looks at what committed. A name with
no object gets a tombstone object (put-if-absent, so the writer's own put fails);
for an object that exists, the tail of each stream it has a slice of is rewritten
unchanged (a CAS that bumps its version, so a commit still in flight, which
expects the old version, fails and loses its session). What the collector then
finds in the index is exactly what ever committed.

Ages are measured on the metadata plane's clock (record timestamps against the
timestamp of a write made now), never by comparing two machines' clocks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable
from urllib.parse import quote

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ..meta import cas
from ..objstore import ObjectExists, ObjectNotFound, ObjectStore
from . import metrics, records, wal_format
from .errors import CorruptObject
from .records import Tail

log = logging.getLogger(__name__)

#: How far past the writer's offset hint the collector looks for an orphan's slices.
RESOLVE_SCAN_LIMIT = 256
#: Written by the collector to read the metadata plane's clock.
CLOCK_KEY = "/nereus/gc/clock"
#: Put in place of an object a dead writer never wrote, so a late put of it fails.
TOMBSTONE = b"nereus: name claimed by the collector\n"


def _now_ms() -> int:
    return int(time.time() * 1000)


def object_name(prefix: str, seq: int) -> str:
    return f"{prefix}{seq:010d}"


async def reserve(meta: MetadataStore, prefix: str, first: int, count: int) -> str:
    """Record that objects ``prefix + [first, first + count)`` may be written; returns the marker key."""
    marker = records.gc_pending_key(object_name(prefix, first))
    await meta.put(marker, records.encode({"ts": _now_ms(), "prefix": prefix, "first": first, "count": count}))
    return marker


async def seal(meta: MetadataStore, object_key: str, committed: Iterable[tuple[int, int]]) -> None:
    """Record which slices of the object committed (after its commit round)."""
    committed = [list(pair) for pair in committed]
    freed = False

    def apply(old: bytes | None) -> bytes | None:
        nonlocal freed
        freed = False  # of this attempt's outcome only (a later attempt may find it sealed)
        value = records.decode(old)
        if value.get("state") == "sealed":
            return None  # sealed already (by the collector after a long stall)
        released = value.get("released", [])
        live = [pair for pair in committed if pair not in released]
        freed = not live
        return records.encode({"state": "sealed", "live": live, "ts": _now_ms()})

    # The record is usually new: only a release that beat the seal, or the collector, wrote it first.
    await cas.update(meta, records.object_key(object_key), apply, likely_absent=True)
    if freed:
        await _mark_free(meta, object_key)


async def release(meta: MetadataStore, object_key: str, slices: Iterable[tuple[int, int]]) -> None:
    """Drop references from index entries that were removed (idempotent)."""
    slices = [list(pair) for pair in slices]
    freed = False

    def apply(old: bytes | None) -> bytes | None:
        nonlocal freed
        value = records.decode(old)
        if value.get("state") != "sealed":
            released = value.get("released", [])
            return records.encode({"state": "early", "released": released + [p for p in slices if p not in released]})
        live = [pair for pair in value["live"] if pair not in slices]
        if live == value["live"]:
            return None
        freed = not live
        return records.encode({**value, "live": live})

    await cas.update(meta, records.object_key(object_key), apply)
    if freed:
        await _mark_free(meta, object_key)


async def pin(meta: MetadataStore, object_key: str, holder: str, ttl_seconds: float | None = None) -> None:
    """Keep ``object_key`` from deletion while ``holder`` uses it (until unpinned or expired).

    The expiry counts from the pin record's own (metadata-plane) timestamp.
    """
    ttl_ms = int(ttl_seconds * 1000) if ttl_seconds else 0
    await meta.put(records.pin_key(object_key, holder), records.encode({"ttl_ms": ttl_ms}))


async def unpin(meta: MetadataStore, object_key: str, holder: str) -> None:
    await meta.delete(records.pin_key(object_key, holder))


async def pinned_by(meta: MetadataStore, holder: str) -> list[str]:
    """The objects ``holder`` pins (a scan of every pin: for a table's occasional repair)."""
    suffix = "/" + quote(holder, safe="")
    out = []
    for lo, hi in records.subtree_ranges(records.GC_PINS_ROOT):  # pins are two levels below the root
        async for pin_key in meta.list(lo, hi):
            if pin_key.endswith(suffix):
                out.append(records.object_from_marker(pin_key[: -len(suffix)]))
    return out


async def _mark_free(meta: MetadataStore, object_key: str) -> None:
    try:
        await meta.put(records.gc_free_key(object_key), records.encode({"ts": _now_ms()}),
                       expected_version_id=EXPECT_ABSENT)
    except UnexpectedVersion:
        pass


@dataclass
class CollectStats:
    resolved: int = 0
    deleted: int = 0


class GarbageCollector:
    """Deletes objects that no index entry refers to, and resolves crashed writes."""

    def __init__(self, meta: MetadataStore, objects: ObjectStore, *, grace_seconds: float = 60.0,
                 pending_timeout_seconds: float = 60.0, clock: Callable[[], float] | None = None):
        """``clock`` (seconds) replaces the metadata plane's clock; for tests only."""
        self.meta = meta
        self.objects = objects
        self.grace_ms = int(grace_seconds * 1000)
        self.pending_timeout_ms = int(pending_timeout_seconds * 1000)
        self.clock = clock

    async def now_ms(self) -> int:
        """The metadata plane's time now (the timestamp of a write made for that)."""
        if self.clock is not None:
            return int(self.clock() * 1000)
        result = await self.meta.put(CLOCK_KEY, b"")
        return result.version.modified_timestamp

    async def collect(self) -> CollectStats:
        """One pass over the pending and free markers."""
        stats = CollectStats()
        now = await self.now_ms()
        async for marker in self.meta.range_scan(records.GC_PENDING_ROOT + "/", records.GC_PENDING_ROOT + "/\U0010ffff"):
            if now - marker.version.modified_timestamp >= self.pending_timeout_ms:
                value = records.decode(marker.value)
                if value.get("kind") == "compaction":
                    await self._resolve_compaction(marker.key, value)
                    stats.resolved += 1
                elif value.get("kind") == "keyview":
                    from .key_view import resolve_marker

                    await resolve_marker(self.meta, marker.key, value)
                    stats.resolved += 1
                elif await self._resolve(marker, value):
                    stats.resolved += 1
        async for marker in self.meta.range_scan(records.GC_FREE_ROOT + "/", records.GC_FREE_ROOT + "/\U0010ffff"):
            if now - marker.version.modified_timestamp >= self.grace_ms:
                if await self._delete(records.object_from_marker(marker.key), marker.key, now):
                    stats.deleted += 1
        return stats

    async def _resolve(self, marker, value: dict) -> bool:
        """Seal every unsealed object of a dead writer's block, then drop the marker.

        False if the block's writer touched the marker meanwhile (it is alive).
        """
        if not value.get("resolving"):
            try:  # the claim: from here on the block is the collector's
                await self.meta.put(marker.key, records.encode({**value, "resolving": True}),
                                    expected_version_id=marker.version.version_id)
            except UnexpectedVersion:
                return False
        for seq in range(value["first"], value["first"] + value["count"]):
            name = object_name(value["prefix"], seq)
            record = await self.meta.get(records.object_key(name))
            if record is not None and records.decode(record.value).get("state") == "sealed":
                continue
            try:
                await metrics.put_object(self.objects, name, TOMBSTONE, "tombstone")
                data = TOMBSTONE  # never written: now it never will be
            except ObjectExists:
                try:
                    data = await self.objects.get(name)
                except ObjectNotFound:
                    continue  # deleted meanwhile by another collector's pass
            try:
                layouts = wal_format.decode_directory(data)
            except CorruptObject:
                if data is not TOMBSTONE and data != TOMBSTONE:
                    log.warning("gc: unreadable orphan %s; nothing can reference it", name)
                layouts = []
            committed = []
            for layout in layouts:
                await self._fence_tail(layout.stream_id)
                committed += await self._committed_slices(layout.stream_id, layout.base_hint, name)
            if layouts:
                log.info("gc: object %s resolved after a dead or stalled write: %d slice(s) committed",
                         name, len(committed))
            await seal(self.meta, name, committed)
        await self.meta.delete(marker.key)
        return True

    async def _fence_tail(self, stream_id: int) -> None:
        """Bump the tail's version without changing it: an in-flight commit then fails."""
        partition = records.stream_partition(stream_id)
        while True:
            current = await self.meta.get(records.tail_key(stream_id), partition_key=partition)
            if current is None:
                return  # deleted stream (or never committed): nothing can land
            try:
                await self.meta.put(records.tail_key(stream_id), current.value,
                                    expected_version_id=current.version.version_id, partition_key=partition)
                return
            except UnexpectedVersion:
                continue

    async def _resolve_compaction(self, marker_key: str, value: dict) -> None:
        """Finish or undo a compaction whose compactor died (see ``storage.compaction``).

        The switch landed iff ``idx/{last}`` names the compacted object, or the
        object's reference was released since (a trim removed the landed group).
        """
        from .compaction import finish

        name, stream_id, first = value["object"], value["stream"], value["first"]
        pair = [stream_id, first]
        record = await self.meta.get(records.object_key(name))
        state = records.decode(record.value) if record is not None else {}
        landed = False
        if not value.get("aborted"):
            rec = await self.meta.get(records.index_key(stream_id, value["last"]),
                                      partition_key=records.stream_partition(stream_id))
            if rec is not None and any(e.object == name for e in records.decode_group(rec.value)):
                landed = True
            elif state.get("state") == "sealed" and pair not in state["live"]:
                landed = True
        if landed:
            log.info("gc: finishing the compaction of stream %d into %s", stream_id, name)
            await finish(self.meta, stream_id, [(k, None) for k in value["groups"][:-1]],
                         [tuple(r) for r in value["replaced"]], marker_key)
            return
        log.info("gc: undoing the compaction of stream %d into %s (it never became visible)", stream_id, name)
        if state.get("state") == "sealed":
            await release(self.meta, name, [tuple(pair)])
        else:
            await seal(self.meta, name, [])  # never sealed: nothing refers to it
        await self.meta.delete(marker_key)

    async def _committed_slices(self, stream_id: int, hint: int, object_key: str) -> list[tuple[int, int]]:
        """Slices of ``object_key`` in the stream's index, looking from the writer's hint on."""
        partition = records.stream_partition(stream_id)
        found: set[tuple[int, int]] = set()
        lo, hi = records.index_range(stream_id, hint)
        seen = 0
        async for rec in self.meta.range_scan(lo, hi, partition_key=partition, page_size=16):
            for entry in records.decode_group(rec.value):
                if entry.object == object_key:
                    found.add((stream_id, entry.base))
            seen += 1
            if seen >= RESOLVE_SCAN_LIMIT:
                break
        tail = await self.meta.get(records.tail_key(stream_id), partition_key=partition)
        if tail is not None:
            for entry in Tail.decode(tail.value).pending:
                if entry.object == object_key:
                    found.add((stream_id, entry.base))
        return sorted(found)

    async def _pinned(self, object_key: str, now_ms: int) -> bool:
        lo, hi = records.pins_range(object_key)
        async for pin in self.meta.range_scan(lo, hi):
            value = records.decode(pin.value)
            ttl_ms, expires = value.get("ttl_ms", 0), value.get("expires", 0)
            if ttl_ms:
                if now_ms - pin.version.modified_timestamp < ttl_ms:
                    return True
            elif not expires or expires > now_ms:  # ("expires": pins written by older versions)
                return True
        return False

    async def _delete(self, object_key: str, marker_key: str, now_ms: int) -> bool:
        if await self._pinned(object_key, now_ms):
            log.debug("gc: %s is free but pinned; kept", object_key)
            return False  # a table or a job still reads it: keep the free marker, look again later
        record = await self.meta.get(records.object_key(object_key))
        if record is not None:
            value = records.decode(record.value)
            if value.get("state") != "sealed" or value["live"]:
                await self.meta.delete(marker_key)  # referenced again (cannot happen today); keep it
                return False
        try:
            size = (await self.objects.head(object_key)).size
        except ObjectNotFound:
            size = 0
        if await self.objects.delete(object_key):
            metrics.GC_DELETED_OBJECTS.inc()
            metrics.GC_RECLAIMED_BYTES.inc(size)
        if record is not None:
            try:
                await self.meta.delete(records.object_key(object_key), expected_version_id=record.version.version_id)
            except UnexpectedVersion:
                pass
        await self.meta.delete(marker_key)
        log.debug("gc: deleted object %s", object_key)
        return True
