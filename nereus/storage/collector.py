"""The garbage collector: deletes objects nothing refers to and resolves crashed writes.

It works from metadata alone (the reference counts of ``gc.py``) and never lists the
object store: it scans the pending and free markers.

A free marker older than the grace period: the object is deleted (unless pinned),
then its record.

A pending marker older than the timeout belongs to a dead (or hopelessly slow)
writer. A writer's reserved block (a marker without a kind): each unsealed name of
it is resolved from the object's own slice directory and the offset index (the
slices' base-offset hints say where to look); a sealed name keeps only the slices
the index holds (the writer may have died before releasing those that failed). A marker of another kind is handed to
the resolver registered for it (``RESOLVERS``: compaction finishes or undoes a dead
compactor's change, ``compaction.resolve_marker``; a key view's builder likewise,
``key_view.resolve_marker``).

Resolving a block is safe even if the writer is only stalled (a long pause, a slow
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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from ..meta import MetadataStore, UnexpectedVersion, cas
from ..wal.errors import WalError
from ..objstore import ObjectExists, ObjectNotFound, ObjectStore
from . import compaction, key_view, metrics, records, wal_format, wal_groups, wal_locator, wal_replicas
from .errors import CorruptObject
from .gc import object_name, release, seal
from .records import Tail
from .wal_replicas import ReplicaDirectory, WalUnavailable

log = logging.getLogger(__name__)

#: How far past the writer's offset hint the collector looks for an orphan's slices.
RESOLVE_SCAN_LIMIT = 256
#: Written by the collector to read the metadata plane's clock.
CLOCK_KEY = "/nereus/gc/clock"
#: Put in place of an object a dead writer never wrote, so a late put of it fails.
TOMBSTONE = b"nereus: name claimed by the collector\n"

#: ``resolve(meta, marker key, marker value)``: finish or undo the change a dead writer's
#: pending marker describes, then delete the marker.
MarkerResolver = Callable[[MetadataStore, str, dict], Awaitable[None]]
#: The resolver of each kind of pending marker, by the value of its ``kind`` field.
RESOLVERS: Mapping[str, MarkerResolver] = {
    compaction.MARKER_KIND: compaction.resolve_marker,
    key_view.MARKER_KIND: key_view.resolve_marker,
}


@dataclass
class CollectStats:
    resolved: int = 0
    deleted: int = 0


class GarbageCollector:
    """Deletes objects that no index entry refers to, and resolves crashed writes."""

    def __init__(self, meta: MetadataStore, objects: ObjectStore, *, grace_seconds: float = 60.0,
                 pending_timeout_seconds: float = 60.0, clock: Callable[[], float] | None = None,
                 resolvers: Mapping[str, MarkerResolver] = RESOLVERS, directory: ReplicaDirectory | None = None):
        """``clock`` (seconds) replaces the metadata plane's clock; for tests only.
        ``resolvers``: the resolver of each kind of pending marker (a kindless marker is a
        writer's reserved block, resolved here). ``directory``: the WAL replicas, for blocks
        written to them (without it such blocks are left to a collector that has one)."""
        self.meta = meta
        self.directory = directory
        self.objects = objects
        self.resolvers = resolvers
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
                kind = value.get("kind")
                if kind is None:  # a writer's reserved block
                    if await self._resolve(marker, value):
                        stats.resolved += 1
                elif kind in self.resolvers:
                    await self.resolvers[kind](self.meta, marker.key, value)
                    stats.resolved += 1
                else:
                    log.warning("gc: pending marker %s of unknown kind %r left alone", marker.key, kind)
        async for marker in self.meta.range_scan(records.GC_FREE_ROOT + "/", records.GC_FREE_ROOT + "/\U0010ffff"):
            if now - marker.version.modified_timestamp >= self.grace_ms:
                if await self._delete(records.object_from_marker(marker.key), marker.key, now):
                    stats.deleted += 1
        return stats

    async def _resolve(self, marker, value: dict) -> bool:
        """Seal every unsealed object of a dead writer's block, then drop the marker.

        False if the block's writer touched the marker meanwhile (it is alive).
        """
        wal = value.get("wal")
        if wal is not None and self.directory is None:
            return False
        if not value.get("resolving"):
            try:  # the claim: from here on the block is the collector's
                await self.meta.put(marker.key, records.encode({**value, "resolving": True}),
                                    expected_version_id=marker.version.version_id)
            except UnexpectedVersion:
                return False
        if wal is not None and not await self._recover_replicated(marker.key, value):
            return False
        for seq in range(value["first"], value["first"] + value["count"]):
            name = object_name(value["prefix"], seq)
            record = await self.meta.get(records.object_key(name))
            if record is not None:
                sealed = records.decode(record.value)
                if sealed.get("state") == "sealed":
                    await self._release_uncommitted(name, sealed["live"])
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
        if wal_groups.is_grouped(object_name(value["prefix"], value["first"])):
            await self._claim_group(value["prefix"], value["first"])
        await self.meta.delete(marker.key)
        if wal is not None:
            for replica_id in wal["ensemble"]:
                replica = self.directory.replica(replica_id)
                if replica is not None:
                    try:
                        await replica.drop(marker.key)
                    except Exception as exc:  # its janitor drops it on seeing the marker gone
                        log.debug("gc: dropping block %s on replica %s failed: %s", marker.key, replica_id, exc)
        return True

    async def _release_uncommitted(self, object_key: str, live: list) -> None:
        """Release the slices a sealed object names that never committed.

        The writer seals an object in its commit round, naming every slice of it, and
        releases the slices whose commit failed afterwards: a writer that died between
        the two left them named. A slice whose stream has committed past its base either
        is in the index or can never land (its commit expected the tail it had then);
        otherwise the tail is fenced first, so what the index then holds is final. (Streams
        that moved on are not fenced: their new owners' commits go on undisturbed.)
        """
        stale = []
        for stream_id in sorted({sid for sid, _ in live}):
            bases = [base for sid, base in live if sid == stream_id]
            tail = await self.meta.get(records.tail_key(stream_id), partition_key=records.stream_partition(stream_id))
            if tail is not None and Tail.decode(tail.value).next <= max(bases):
                await self._fence_tail(stream_id)
            committed = set(await self._committed_slices(stream_id, min(bases), object_key))
            stale += [[stream_id, base] for base in bases if (stream_id, base) not in committed]
        if stale:
            log.info("gc: object %s named %d slice(s) that never committed; released", object_key, len(stale))
            await release(self.meta, object_key, stale)

    async def _recover_replicated(self, marker_key: str, value: dict) -> bool:
        """Fence a dead writer's block on its WAL replicas, then upload every object they hold.

        After the fence no write of the block can be acknowledged any more, and every
        acknowledged one is on a fenced replica; what is uploaded is then resolved as any
        object (committed slices sealed, the rest collected). False (try again on a later
        pass) while too few replicas answer.
        """
        wal = value["wal"]
        try:
            held = await wal_replicas.fence(self.directory, wal["ensemble"], wal["write"], wal["ack"], marker_key)
            for name in sorted(held):
                if not name.startswith(value["prefix"]):
                    continue
                block = {**value, "marker": marker_key}
                data = await wal_replicas.read(self.directory, wal_locator.replicas_of(block, name), name)
                try:
                    await metrics.put_object(self.objects, name, data, "wal_upload")
                except ObjectExists:
                    pass  # uploaded by its writer already
        except (WalError, WalUnavailable, OSError) as exc:
            log.warning("gc: block %s of a dead writer cannot be recovered from its WAL replicas yet: %s",
                        marker_key, exc)
            return False
        if held:
            log.info("gc: block %s recovered from its WAL replicas: %d object(s) uploaded", marker_key, len(held))
        return True

    async def _fence_tail(self, stream_id: int) -> None:
        """Bump the tail's version without changing it: an in-flight commit then fails."""
        # The same value written again: an absent tail (deleted stream, or never committed)
        # stays absent, as nothing can land there.
        await cas.update(self.meta, records.tail_key(stream_id), lambda old: old,
                         partition_key=records.stream_partition(stream_id))

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
        if wal_locator.on_replicas(object_key) and await wal_locator.find_block(self.meta, object_key) is not None:
            return False  # its upload may still be on its way: deleted once its block is done
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
        await wal_groups.release_member(self.meta, object_key)  # before its record goes: a retry does it again
        if record is not None:
            try:
                await self.meta.delete(records.object_key(object_key), expected_version_id=record.version.version_id)
            except UnexpectedVersion:
                pass
        await self.meta.delete(marker_key)
        log.debug("gc: deleted object %s", object_key)
        return True

    async def _claim_group(self, prefix: str, first: int) -> None:
        """A dead writer's block: its group object, if the writer sealed it, stays (its members
        are read there); if not, the name is claimed (a late put of it fails) and freed."""
        group = wal_groups.group_name(prefix, first)
        if await self.meta.get(records.object_key(group)) is not None:
            return
        try:
            await metrics.put_object(self.objects, group, TOMBSTONE, "tombstone")
        except ObjectExists:
            pass  # put by the writer, never sealed: nothing reads it
        await seal(self.meta, group, [])  # no member: freed, deleted after the grace period


__all__ = ["CLOCK_KEY", "CollectStats", "GarbageCollector", "MarkerResolver", "RESOLVERS", "TOMBSTONE"]
