"""Object reference tracking and garbage collection, driven by metadata only.

Each object has a record ``/nereus/objects/{key}``:

    {"state": "writing", "streams": {sid: hint}, "released": [[sid, base]...], "ts": ms}
    {"state": "sealed",  "live": [[sid, base], ...], "ts": ms}

The writer registers the object (state ``writing`` plus a pending marker) BEFORE
the object is put, so a crash at any later point leaves a metadata trace. After the
commit round it seals the record with the slices that committed. Releases (trim,
stream deletion, compaction) remove ``[sid, base]`` pairs: removing a pair that is
not there is a no-op, so a release is idempotent and a slice can never be counted
twice. When ``live`` is empty a free marker is written; the collector deletes the
object once the marker is older than the grace period (which protects readers that
resolved an index entry just before it was released), then the record.

The collector never lists the object store: it scans the pending and free markers.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ..meta import cas
from ..objstore import ObjectStore
from . import metrics, records
from .records import IndexEntry, Tail

log = logging.getLogger(__name__)

#: How far past the writer's offset hint the collector looks for an orphan's slices.
RESOLVE_SCAN_LIMIT = 256


def _now_ms() -> int:
    return int(time.time() * 1000)


async def register(meta: MetadataStore, object_key: str, stream_hints: dict[int, int]) -> None:
    """Record an object about to be written (before it exists in the store)."""
    value = records.encode({"state": "writing", "streams": {str(k): v for k, v in stream_hints.items()},
                            "released": [], "ts": _now_ms()})
    await meta.put(records.object_key(object_key), value, expected_version_id=EXPECT_ABSENT)
    await meta.put(records.gc_pending_key(object_key), records.encode({"ts": _now_ms()}))


async def seal(meta: MetadataStore, object_key: str, committed: Iterable[tuple[int, int]]) -> None:
    """Mark the object's commit round finished, keeping the slices that committed."""
    committed = [list(pair) for pair in committed]
    freed = False

    def apply(old: bytes | None) -> bytes | None:
        nonlocal freed
        value = records.decode(old)
        if value.get("state") != "writing":
            return None
        released = value.get("released", [])
        live = [pair for pair in committed if pair not in released]
        freed = not live
        return records.encode({"state": "sealed", "live": live, "ts": value.get("ts", _now_ms())})

    await cas.update(meta, records.object_key(object_key), apply)
    if freed:
        await _mark_free(meta, object_key)
    await meta.delete(records.gc_pending_key(object_key))


async def release(meta: MetadataStore, object_key: str, slices: Iterable[tuple[int, int]]) -> None:
    """Drop references from index entries that were removed (idempotent)."""
    slices = [list(pair) for pair in slices]
    freed = False

    def apply(old: bytes | None) -> bytes | None:
        nonlocal freed
        if old is None:
            return None
        value = records.decode(old)
        if value["state"] == "writing":
            released = value["released"] + [p for p in slices if p not in value["released"]]
            return records.encode({**value, "released": released})
        live = [pair for pair in value["live"] if pair not in slices]
        if live == value["live"]:
            return None
        freed = not live
        return records.encode({**value, "live": live})

    await cas.update(meta, records.object_key(object_key), apply)
    if freed:
        await _mark_free(meta, object_key)


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
                 pending_timeout_seconds: float = 60.0, clock: Callable[[], float] = time.time):
        self.meta = meta
        self.objects = objects
        self.grace_ms = int(grace_seconds * 1000)
        self.pending_timeout_ms = int(pending_timeout_seconds * 1000)
        self.clock = clock

    async def collect(self) -> CollectStats:
        """One pass over the pending and free markers."""
        stats = CollectStats()
        now = int(self.clock() * 1000)
        async for marker in self.meta.range_scan(records.GC_PENDING_ROOT + "/", records.GC_PENDING_ROOT + "/\U0010ffff"):
            if now - records.decode(marker.value)["ts"] >= self.pending_timeout_ms:
                await self._resolve(records.object_from_marker(marker.key))
                stats.resolved += 1
        async for marker in self.meta.range_scan(records.GC_FREE_ROOT + "/", records.GC_FREE_ROOT + "/\U0010ffff"):
            if now - records.decode(marker.value)["ts"] >= self.grace_ms:
                await self._delete(records.object_from_marker(marker.key), marker.key)
                stats.deleted += 1
        return stats

    async def _resolve(self, object_key: str) -> None:
        """Seal an object whose writer died mid-round: find which slices committed."""
        record = await self.meta.get(records.object_key(object_key))
        if record is None:
            await self.meta.delete(records.gc_pending_key(object_key))
            return
        value = records.decode(record.value)
        if value["state"] != "writing":
            await self.meta.delete(records.gc_pending_key(object_key))
            return
        committed = []
        for sid, hint in value["streams"].items():
            committed += await self._committed_slices(int(sid), hint, object_key)
        log.info("gc: object %s resolved after a crashed write: %d slice(s) committed", object_key, len(committed))
        await seal(self.meta, object_key, committed)

    async def _committed_slices(self, stream_id: int, hint: int, object_key: str) -> list[tuple[int, int]]:
        partition = records.stream_partition(stream_id)
        found: set[tuple[int, int]] = set()
        lo, hi = records.index_range(stream_id, hint)
        seen = 0
        async for rec in self.meta.range_scan(lo, hi, partition_key=partition, page_size=64):
            entry = IndexEntry.from_json(records.decode(rec.value))
            if entry.object == object_key:
                found.add((stream_id, entry.base))
            seen += 1
            if seen >= RESOLVE_SCAN_LIMIT:
                break
        tail = await self.meta.get(records.tail_key(stream_id), partition_key=partition)
        if tail is not None:
            last = Tail.decode(tail.value).last
            if last is not None and last.object == object_key:
                found.add((stream_id, last.base))
        return sorted(found)

    async def _delete(self, object_key: str, marker_key: str) -> None:
        record = await self.meta.get(records.object_key(object_key))
        if record is not None:
            value = records.decode(record.value)
            if value.get("state") != "sealed" or value["live"]:
                await self.meta.delete(marker_key)  # referenced again (cannot happen today); keep it
                return
        await self.objects.delete(object_key)
        metrics.GC_DELETED_OBJECTS.inc()
        if record is not None:
            try:
                await self.meta.delete(records.object_key(object_key), expected_version_id=record.version.version_id)
            except UnexpectedVersion:
                pass
        await self.meta.delete(marker_key)
        log.debug("gc: deleted object %s", object_key)
