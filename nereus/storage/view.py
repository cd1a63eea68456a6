"""Read-only questions about streams, answered from the metadata plane alone.

For callers that hold a metadata client but no ``StreamStorage`` (Spark executors,
the admin API's statistics, the table sync): they ask here instead of reading
storage's metadata keys themselves, so the key layout stays storage's own.
"""

from __future__ import annotations

from typing import AsyncIterator

from ..meta import Comparison, MetadataStore
from . import records
from .records import IndexEntry, Tail


async def stream_id(meta: MetadataStore, name: str) -> int | None:
    """The id of stream ``name``; None if it does not exist."""
    rec = await meta.get(records.name_key(name))
    return records.decode(rec.value)["id"] if rec is not None else None


async def stream_name(meta: MetadataStore, sid: int) -> str | None:
    """The name of stream ``sid``; None if it does not exist (or was deleted)."""
    rec = await meta.get(records.meta_key(sid), partition_key=records.stream_partition(sid))
    return records.decode(rec.value)["name"] if rec is not None else None


async def stream_names(meta: MetadataStore) -> AsyncIterator[str]:
    """Every stream's name, in key order."""
    lo, hi = records.names_range()
    async for key in meta.list(lo, hi):
        yield records.name_from_key(key)


async def bounds(meta: MetadataStore, sid: int) -> tuple[int, int]:
    """(start offset, committed end) of a stream: what a reader may read."""
    key = records.stream_partition(sid)
    start_rec = await meta.get(records.start_key(sid), partition_key=key)
    tail_rec = await meta.get(records.tail_key(sid), partition_key=key)
    start = records.decode(start_rec.value).get("start", 0) if start_rec is not None else 0
    end = Tail.decode(tail_rec.value).next if tail_rec is not None else 0
    return start, max(start, end)


async def tail(meta: MetadataStore, sid: int) -> Tail:
    rec = await meta.get(records.tail_key(sid), partition_key=records.stream_partition(sid))
    return Tail.decode(rec.value) if rec is not None else Tail(0, 0, 0)


async def indexed_entries(meta: MetadataStore, sid: int, start: int = 0) -> AsyncIterator[IndexEntry]:
    """The entries of the offset index's groups from the group holding ``start`` on (not the tail's)."""
    lo, hi = records.index_range(sid, start)
    async for rec in meta.range_scan(lo, hi, partition_key=records.stream_partition(sid)):
        for entry in records.decode_group(rec.value):
            yield entry


async def entries_around(meta: MetadataStore, sid: int, offset: int) -> list[IndexEntry]:
    """The tail's pending entries and those of the index group holding ``offset``."""
    partition = records.stream_partition(sid)
    current = await tail(meta, sid)
    out = list(current.pending)
    rec = await meta.get(records.index_key(sid, offset), comparison=Comparison.CEILING, partition_key=partition)
    if rec is not None and rec.key.startswith(f"{partition}/idx/"):
        out += records.decode_group(rec.value)
    return out




async def size_before(meta: MetadataStore, sid: int, offset: int, tail) -> int:
    """Cumulative bytes of stream ``sid`` before the slice holding ``offset`` (``tail``: the stream's tail)."""
    if offset <= 0:
        return 0
    try:
        slices = await entries_around(meta, sid, offset)
    except (ValueError, KeyError):
        return 0
    for entry in slices:
        if entry.base <= offset < entry.base + entry.records:
            return entry.size_before
    return tail.size if offset >= tail.next else 0


__all__ = ["bounds", "entries_around", "indexed_entries", "size_before", "stream_id", "stream_names", "tail"]
