"""Retention: turn a size or age limit into a trim of the stream's start offset.

Sizes come from the cumulative size carried by every index entry, ages from the
commit time it records, so a policy is applied with index lookups only, never by
reading data. Whole slices are kept or dropped: the start offset always moves to
a slice boundary, never into the middle of an entry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import records
from .service import StreamStorage


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    max_bytes: int | None = None  # keep at most about this many bytes
    max_age_seconds: float | None = None  # drop slices committed longer ago than this


async def enforce(storage: StreamStorage, stream_id: int, policy: RetentionPolicy,
                  *, now: float | None = None) -> int:
    """Trim what the policy no longer keeps; returns the start offset now in force."""
    tail = await storage.tail(stream_id)
    start = await storage.start(stream_id)
    target = start
    now_ms = int((time.time() if now is None else now) * 1000)
    partition = records.stream_partition(stream_id)
    lo, hi = records.index_range(stream_id, start)
    slices = []
    async for rec in storage.meta.range_scan(lo, hi, partition_key=partition):
        slices += [e for e in records.decode_group(rec.value) if e.last >= start]
        if len(slices) > 1024:
            break  # enough to decide this round; the next pass continues
    seen = {e.base for e in slices}
    slices += [e for e in tail.pending if e.last >= start and e.base not in seen]
    for entry in slices:
        too_big = policy.max_bytes is not None and tail.size - entry.size_before > policy.max_bytes
        too_old = policy.max_age_seconds is not None and now_ms - entry.timestamp > policy.max_age_seconds * 1000
        if not (too_big or too_old):
            break
        target = entry.last + 1
    if target > start:
        return await storage.trim(stream_id, target)
    return start
