"""The read resolver: offsets -> index entries -> slices -> entries.

Tailing reads come from the tail cache. Catch-up reads resolve index groups with a
range scan starting at the requested offset (the ``idx`` keys are named after each
group's last offset, so the first key >= offset is the group that contains it), then fetch the slices they point to concurrently (read-ahead up to
``max_bytes``) with one ranged GET each, verify their checksums and cache them.
Slices not yet in an ``idx`` group are listed in the tail record (``pending``).
An object acknowledged on WAL replicas and not uploaded yet is read from them
(``wal_locator``); a process that cannot reach them may wait for the upload instead.

After compaction an ``idx`` key may hold one compacted entry (a Parquet object,
generation > 0) for a run of offsets whose older groups are still being removed:
the scan then meets both, and whole entries line up across generations, so the
reader skips what it already has. A compacted object that is missing falls back
to the slices it replaced (listed beside it) while they exist.
"""

from __future__ import annotations

import asyncio

from ..meta import MetadataStore
from ..objstore import ObjectNotFound, ObjectStore
from ..wal.errors import EntryNotFound
from . import compacted_format, metrics, records, wal_format, wal_locator
from .api import FetchedEntry
from .cache import BlockCache, TailCache
from .errors import CorruptObject, ObjectMissing, StorageError
from .records import IndexEntry, Tail
from .wal_groups import GroupReader
from .wal_locator import WalLocator
from .wal_replicas import WalUnavailable

_INLINE_DECODE_BYTES = 1 << 20
_MAX_READ_AHEAD = 64


class StreamReader:
    def __init__(self, meta: MetadataStore, objects: ObjectStore, tail_cache: TailCache, block_cache: BlockCache,
                 locator: WalLocator | None = None, *, upload_wait: float = 0.0):
        """``locator`` reads objects on WAL replicas, not uploaded yet (without one, this process
        reaches no replica); a slice it cannot read there is waited for in the object store for up
        to ``upload_wait`` seconds (0: the read fails at once with WalUnavailable)."""
        self.meta = meta
        self.locator = locator or WalLocator(meta, None)
        self.groups = GroupReader(meta, objects)
        self.upload_wait = upload_wait
        self.objects = objects
        self.tail_cache = tail_cache
        self.block_cache = block_cache

    async def read(self, stream_id: int, start: int, end: int, max_bytes: int, *,
                   fill_cache: bool = True) -> list[FetchedEntry]:
        """Committed entries from the one containing ``start`` (the caller checked bounds).

        ``fill_cache=False``: slices loaded from objects are not kept in the block cache (a
        one-off scan of a whole stream, such as a compaction build, would evict what
        readers use)."""
        out: list[FetchedEntry] = []
        total = 0
        offset = start
        while offset < end and (not out or total < max_bytes):
            got = self.tail_cache.read(stream_id, offset, end, max_bytes - total)
            source = "cache"
            if not got:
                got = await self._read_objects(stream_id, offset, end, max(1, max_bytes - total), fill_cache)
                source = "object"
            if not got:
                break
            out.extend(got)
            size = sum(len(e.data) for e in got)
            metrics.FETCHED_BYTES.labels(source).inc(size)
            total += size
            offset = got[-1].end_offset
        return out

    async def _read_objects(self, stream_id: int, offset: int, end: int, max_bytes: int,
                            fill_cache: bool = True) -> list[FetchedEntry]:
        try:
            index = await self.resolve(stream_id, offset, end, max_bytes)
            blocks = await asyncio.gather(*(self._load(stream_id, e, fill_cache) for e in index))
        except ObjectMissing:
            # The index moved under us (compaction replaced what we resolved, and the
            # replaced object is gone): resolve once more against the current index.
            index = await self.resolve(stream_id, offset, end, max_bytes)
            blocks = await asyncio.gather(*(self._load(stream_id, e, fill_cache) for e in index))
        out: list[FetchedEntry] = []
        for entry, block in zip(index, blocks):
            base = entry.base
            for count, data in block:
                # Entries of overlapping generations line up: skip what was emitted already.
                if base + count > offset and base < end and (not out or base >= out[-1].end_offset):
                    out.append(FetchedEntry(base, count, data))
                base += count
        return out

    async def resolve(self, stream_id: int, offset: int, end: int, max_bytes: int) -> list[IndexEntry]:
        """Index entries (slices) covering ``offset`` onwards, about ``max_bytes`` worth."""
        partition = records.stream_partition(stream_id)
        lo, hi = records.index_range(stream_id, offset)
        found: list[IndexEntry] = []
        total = 0
        next_needed = offset

        def take(entry: IndexEntry) -> bool:
            """Add a slice if it extends the run; True when enough was found."""
            nonlocal total, next_needed
            if entry.last < next_needed:
                return False  # before the run, or a duplicate from an overlapping group
            if entry.base > next_needed:
                raise StorageError(f"stream {stream_id}: index has no entry for offset {next_needed}")
            found.append(entry)
            total += entry.length
            next_needed = entry.last + 1
            return total >= max_bytes or next_needed >= end or len(found) >= _MAX_READ_AHEAD

        for attempt in range(2):
            async for rec in self.meta.range_scan(lo, hi, partition_key=partition, page_size=4):
                for entry in records.decode_group(rec.value):
                    if take(entry):
                        return found
            tail = await self._tail(stream_id)
            pending = [entry for entry in tail.pending if entry.last >= next_needed]
            if attempt == 0 and tail.next > next_needed and (not pending or pending[0].base > next_needed):
                # A writer puts a full group's idx key, then drops those slices from the tail's
                # pending: between the scan and the tail read they moved. Scan again from here.
                lo = records.index_range(stream_id, next_needed)[0]
                continue
            for entry in pending:
                if take(entry):
                    return found
            break
        if not found:
            raise StorageError(f"stream {stream_id}: no committed entry for offset {offset}")
        return found

    async def _tail(self, stream_id: int) -> Tail:
        rec = await self.meta.get(records.tail_key(stream_id), partition_key=records.stream_partition(stream_id))
        return Tail.decode(rec.value) if rec is not None else Tail(0, 0, 0)

    async def load_slices(self, stream_id: int, entries: list[IndexEntry]) -> list[list[tuple[int, memoryview]]]:
        """The entries of each given slice (checked), e.g. for compaction."""
        return list(await asyncio.gather(*(self._load(stream_id, e) for e in entries)))

    async def _get(self, entry: IndexEntry) -> bytes:
        """The slice's bytes from the store or, before its upload, from its WAL replicas."""
        if wal_locator.on_replicas(entry.object):
            # Its block's marker says whether it is uploaded yet: a store that is down (what the
            # replicas are there for) is not asked, nor one that would answer 404.
            data = await self._from_replicas(entry)
            if data is not None:
                return data
        return await self._stored(entry)

    async def _stored(self, entry: IndexEntry) -> bytes:
        """The slice from the object store: from its object's upload group, or its object."""
        start, end = entry.position, entry.position + entry.length
        if wal_locator.on_replicas(entry.object):
            data = await self.groups.read(entry.object, start, end)
            if data is not None:
                return data
        return await self.objects.get(entry.object, start, end)

    async def _from_replicas(self, entry: IndexEntry) -> bytes | None:
        """The slice from this process's memory or a WAL replica; None when the store has it (its
        block is uploaded) or no replica does (lost or never committed: the store decides)."""
        start, end = entry.position, entry.position + entry.length
        try:
            data = await self.locator.read(entry.object, start, end)
        except EntryNotFound:
            return None
        except WalUnavailable as exc:
            return await self._uploaded(entry, exc)
        if data is not None:
            metrics.WAL_REPLICA_READS.inc()
        return data

    async def _uploaded(self, entry: IndexEntry, why: WalUnavailable) -> bytes:
        """The slice from the object store, where it may be already, or once it is uploaded
        (for up to ``upload_wait`` seconds): its replicas cannot be read from here."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.upload_wait
        pause = 0.02
        while True:
            try:
                return await self._stored(entry)
            except ObjectNotFound:
                pass
            if loop.time() >= deadline:
                if self.upload_wait <= 0:
                    raise why
                raise WalUnavailable(f"{why}; and it was not uploaded within {self.upload_wait:g} s") from None
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)
            if await wal_locator.find_block(self.meta, entry.object) is None:
                # The marker goes only after the upload: the store has it, or it never committed.
                return await self._stored(entry)

    async def _load(self, stream_id: int, entry: IndexEntry, fill_cache: bool = True) -> list[tuple[int, memoryview]]:
        key = (entry.object, entry.position)
        block = self.block_cache.get(key)
        if block is not None:
            return block
        try:
            data = await self._get(entry)
        except ObjectNotFound:
            if entry.fallback:  # a compacted object is missing: read the slices it replaced
                blocks = await self.load_slices(stream_id, list(entry.fallback))
                return [item for block in blocks for item in block]
            raise ObjectMissing(f"object {entry.object} of stream {stream_id} is missing") from None
        if len(data) != entry.length:
            raise CorruptObject(f"object {entry.object} is shorter than its index entry says")
        if entry.compacted:
            block = await asyncio.get_running_loop().run_in_executor(
                None, compacted_format.decode_entries, data, stream_id, entry.base, entry.records)
        elif entry.length > _INLINE_DECODE_BYTES:
            block = await asyncio.get_running_loop().run_in_executor(None, wal_format.decode_slice, data, stream_id)
        else:
            block = wal_format.decode_slice(data, stream_id)
        if sum(count for count, _ in block) != entry.records:
            raise ObjectMissing(f"object {entry.object}: slice record count differs from the index")
        if fill_cache:
            self.block_cache.put(key, entry.length, block)
        return block
