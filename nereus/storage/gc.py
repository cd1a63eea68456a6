"""Object reference counts in the metadata plane: reserve, seal, release, pin.

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
marker is written; the collector (``collector.py``) deletes the object once the
marker is older than the grace period (which protects readers that resolved an
index entry just before it was released), then the record.

Other writers of objects (compaction, key views) write pending markers of their own
kind before their object exists; the module that owns a kind resolves it for the
collector. A pin (``/nereus/gc/pins/{key}/{holder}``: a table listing the object as
a data file, a job reading it) keeps a freed object until it is unpinned or expires.
"""

from __future__ import annotations

import time
from typing import Iterable
from urllib.parse import quote, unquote

from ..meta import EXPECT_ABSENT, MetadataStore, PutOp, UnexpectedVersion
from ..meta import cas
from . import records


def _now_ms() -> int:
    return int(time.time() * 1000)


def object_name(prefix: str, seq: int) -> str:
    return f"{prefix}{seq:010d}"


async def reserve(meta: MetadataStore, prefix: str, first: int, count: int,
                  extra: dict | None = None) -> tuple[str, int, dict]:
    """Record that objects ``prefix + [first, first + count)`` may be written.

    ``extra`` joins the marker's value (a block on WAL replicas names them). Returns the
    marker's key, version and value.
    """
    marker = records.gc_pending_key(object_name(prefix, first))
    value = {"ts": _now_ms(), "prefix": prefix, "first": first, "count": count, **(extra or {})}
    result = await meta.put(marker, records.encode(value))
    return marker, result.version.version_id, value


def _sealed(live: list) -> bytes:
    return records.encode({"state": "sealed", "live": live, "ts": _now_ms()})


def seal_op(object_key: str, slices: Iterable[tuple[int, int]]) -> PutOp:
    """The create of the object's sealed record naming ``slices``, for a writer's commit round.

    It goes in the same ``put_many`` as the slices' commits (one metadata round for both).
    It fails if the record exists (a release or the collector came first): then ``seal``
    after the round. A slice that then did not commit is released (``release``).
    """
    return PutOp(records.object_key(object_key), _sealed([list(pair) for pair in slices]),
                 expected_version_id=EXPECT_ABSENT)


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
        return _sealed(live)

    # The record is usually new: only a release that beat the seal, or the collector, wrote it first.
    await cas.update(meta, records.object_key(object_key), apply, likely_absent=True)
    if freed:
        await mark_free(meta, object_key)


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
        await mark_free(meta, object_key)


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


async def pins(meta: MetadataStore, holder_prefix: str = "") -> list[tuple[str, str]]:
    """``(object, holder)`` of every pin whose holder starts with ``holder_prefix`` (a scan of every pin)."""
    out = []
    for lo, hi in records.subtree_ranges(records.GC_PINS_ROOT):
        async for pin_key in meta.list(lo, hi):
            object_part, _, holder = pin_key.rpartition("/")
            holder = unquote(holder)
            if holder.startswith(holder_prefix):
                out.append((records.object_from_marker(object_part), holder))
    return out


async def mark_free(meta: MetadataStore, object_key: str) -> None:
    """Write the object's free marker (the collector deletes it after the grace period)."""
    try:
        await meta.put(records.gc_free_key(object_key), records.encode({"ts": _now_ms()}),
                       expected_version_id=EXPECT_ABSENT)
    except UnexpectedVersion:
        pass


__all__ = ["mark_free", "object_name", "pin", "pinned_by", "release", "reserve", "seal", "unpin"]
