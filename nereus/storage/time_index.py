"""A coarse time index of a stream: marks ``(offset, max timestamp of every record before it)``.

The writer (the topic layer, which knows the entries' timestamps) marks every few
thousand records ``…/tidx/{max before:020d}`` -> ``{"offset"}``. The running maximum
only grows, so the marks are sorted by both keys, and "where can the first record
at or after T be" is one ``LOWER`` lookup: the last mark whose maximum before is
below T; every record before its offset is older than T, and the next mark bounds
the scan. A missing mark only makes the scan longer, never the answer wrong.
"""

from __future__ import annotations

import json

from ..meta import Comparison
from . import records

WIDTH = 20


def _prefix(stream_id: int) -> str:
    return f"{records.stream_partition(stream_id)}/tidx/"


def _key(stream_id: int, timestamp: int) -> str:
    return f"{_prefix(stream_id)}{timestamp:0{WIDTH}d}"


async def mark(meta, stream_id: int, offset: int, max_before: int) -> None:
    """Record that every record below ``offset`` has a timestamp of at most ``max_before``."""
    if max_before < 0:
        return
    await meta.put(_key(stream_id, max_before), json.dumps({"offset": offset}).encode(),
                   partition_key=records.stream_partition(stream_id))


async def _lower(meta, stream_id: int, key: str) -> tuple[int, int] | None:
    rec = await meta.get(key, comparison=Comparison.LOWER, partition_key=records.stream_partition(stream_id))
    if rec is None or not rec.key.startswith(_prefix(stream_id)):
        return None
    return json.loads(rec.value)["offset"], int(rec.key[len(_prefix(stream_id)):])


async def before(meta, stream_id: int, timestamp: int) -> int:
    """An offset below which every record is older than ``timestamp`` (0 when none is known)."""
    if timestamp <= 0:
        return 0
    found = await _lower(meta, stream_id, _key(stream_id, timestamp))
    return found[0] if found else 0


async def last(meta, stream_id: int) -> tuple[int, int] | None:
    """The newest mark as ``(offset, max before)``, or None."""
    return await _lower(meta, stream_id, _prefix(stream_id) + "~")


__all__ = ["before", "last", "mark"]
