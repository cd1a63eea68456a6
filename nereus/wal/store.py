"""``WalStore``: one replica's entries on local disk (the bookie's role: append, fence, read, drop).

Records go to preallocated segment files (``segments.py``, layout in ``records.py``); the index
of what they hold lives in memory (``index.py``) and is rebuilt from them on open. Data is
never cached: reads ``pread`` the disk.

One writer task commits: every record queued while a write and its ``fdatasync`` are in flight
joins the next one (group commit), and nothing is acknowledged before its ``fdatasync``
returned. File work runs in two executors of the store's own, one thread that writes (so
commits keep their order) and a few that read, so the event loop never waits on the disk.

Fencing is decided when ``fence`` is called: from then on appends to the block are refused
at once, and those queued before it are written no later than the FENCE record, so the keys
``fence`` returns include every append that succeeded. A failed write or ``fdatasync`` leaves
the files in an unknown state: the store then refuses everything until reopened.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


from ..direct_io import DirectWriter
from . import metrics, records, segments
from .errors import BlockFenced, EntryNotFound, WalCorrupt, WalError, WalFull
from .index import Index
from .records import DROP, ENTRY, FENCE
from .queued import QueuedRecord, read_checked, write_batch
from .segments import SegmentFile

log = logging.getLogger(__name__)

#: Where a FENCE or DROP goes when the size limit leaves no room for a full segment: a DROP
#: is what frees space, so it must never be refused for the lack of it.
CONTROL_SEGMENT_BYTES = 1 << 20
#: Data checked on the event loop at most; larger checksums are computed in an executor.
_INLINE_CRC_BYTES = 64 << 10

Data = bytes | bytearray | memoryview


class WalStore:
    """A replica's entries on local disk; see the module docstring for the guarantees."""

    def __init__(self, directory: Path, segment_bytes: int, max_bytes: int, max_queued_bytes: int) -> None:
        self.directory = directory
        self._segment_bytes = segment_bytes
        self._max_bytes = max_bytes
        self._max_queued_bytes = max_queued_bytes
        self._index = Index()
        self._files: dict[int, SegmentFile] = {}
        self._active: SegmentFile | None = None
        self._next_seq = 1
        self._used_bytes = 0
        self._lock_fd: int | None = None
        self._writer_pool = ThreadPoolExecutor(1, thread_name_prefix="wal-write")
        self._direct = DirectWriter(keep=1)  # used by the one writer thread only
        self._read_pool = ThreadPoolExecutor(4, thread_name_prefix="wal-read")
        self._queue: list[QueuedRecord] = []
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._queued_bytes = 0
        self._pending: dict[str, QueuedRecord] = {}  # entries queued or in flight, by key
        self._closing_blocks: dict[str, QueuedRecord] = {}  # FENCE or DROP queued or in flight, by block
        self._reads: set[asyncio.Future] = set()
        self._writer: asyncio.Task | None = None
        self._collect_due = True
        self._failure: WalError | None = None
        self._closed = False
        #: fdatasync calls made so far (group commit makes them fewer than appends)
        self.fsyncs = 0

    @classmethod
    async def open(cls, directory: str | Path, *, segment_bytes: int = 64 << 20, max_bytes: int = 8 << 30,
                   max_queued_bytes: int = 64 << 20) -> WalStore:
        """Open (or create) the replica in ``directory``, rebuilding its index from the segments.

        ``max_queued_bytes`` bounds the data of appends not yet on disk: more appends wait.
        """
        store = cls(Path(directory), segment_bytes, max_bytes, max_queued_bytes)
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(store._writer_pool, store._load)
        except BaseException:
            store._release_files()
            raise
        store._writer = loop.create_task(store._write_loop())
        metrics.watch(store)
        return store

    def _load(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WalError(f"WAL directory {self.directory} is in use by another store") from None
        last = None
        for seq, path in segments.list_segments(self.directory):
            segment, scan = segments.open_existing(seq, path)
            self._files[seq] = segment
            self._used_bytes += segment.capacity
            self._index.add_segment(seq)
            for r in scan.records:
                self._index.apply(r.type, r.block, r.key, seq, r.data_position, r.data_len, r.data_crc,
                                  corrupt=not r.data_ok)
                if not r.data_ok:
                    log.error("WAL segment %s: entry %r at %d fails its checksum: not served", path, r.key,
                              r.position)
            for start, end in scan.damaged:
                log.error("WAL segment %s: bytes %d-%d hold no valid record; skipped", path, start, end)
            if not scan.clean_tail:
                log.warning("WAL segment %s: a torn write after byte %d (never acknowledged); ignored",
                            path, scan.end)
            last = (segment, scan)
            self._next_seq = seq + 1
        if last is not None and last[1].clean_tail and last[0].room() > 0:
            self._active = last[0]

    # -- the public interface ------------------------------------------------------------

    async def append(self, block: str, key: str, data: Data | list[Data]) -> None:
        """Store ``data`` as entry ``key`` of ``block``; durable (fsynced) when this returns.

        Appending a key held with the same bytes succeeds without writing; with other bytes
        it is a ``WalError``. A fenced or dropped block raises ``BlockFenced``.
        """
        started = time.perf_counter()
        chunks = [memoryview(c).cast("B") for c in (data if isinstance(data, list) else [data])]
        length = sum(len(c) for c in chunks)
        self._check_usable()
        while self._queued_bytes and self._queued_bytes + length > self._max_queued_bytes:
            self._room.clear()
            await self._room.wait()
            self._check_usable()
        while True:
            if self._blocked(block):
                raise BlockFenced(f"block {block!r} is fenced on this replica")
            pending = self._pending.get(key)
            if pending is None:
                break
            try:
                await asyncio.shield(pending.future)
            except WalError:
                pass  # the earlier try failed: this one is written afresh
        held = self._index.held(key)
        if held is not None:
            await self._check_same(held, block, key, chunks, length)
            return
        op = QueuedRecord(ENTRY, block, key, chunks, length)
        self._pending[key] = op
        self._enqueue(op)
        await asyncio.shield(op.future)
        metrics.APPEND_SECONDS.observe(time.perf_counter() - started)

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of entry ``key`` (checked against its checksum when read whole)."""
        self._check_open()
        entry = self._index.entries.get(key)
        if entry is None:
            raise EntryNotFound(f"no entry {key!r} on this replica")
        if entry.corrupt:
            raise WalCorrupt(f"entry {key!r} fails its checksum on this replica")
        if start < 0 or (end is not None and end < start):
            raise WalError(f"bad range [{start}, {end}) of entry {key!r}")
        end = entry.length if end is None else min(end, entry.length)
        start = min(start, end)
        segment = self._files[entry.segment]
        crc = entry.crc if (start, end) == (0, entry.length) else None
        segment.readers += 1
        reading = asyncio.get_running_loop().run_in_executor(
            self._read_pool, read_checked, segment.fd, entry.position + start, end - start, crc)
        self._reads.add(reading)
        try:
            return await reading
        except WalCorrupt:
            entry.corrupt = True
            log.error("WAL directory %s: entry %r fails its checksum: no longer served", self.directory, key)
            raise WalCorrupt(f"entry {key!r} fails its checksum on this replica") from None
        finally:
            self._reads.discard(reading)
            segment.readers -= 1
            if segment.deleted and segment.readers == 0:
                os.close(segment.fd)

    def holds(self, key: str) -> bool:
        """Whether entry ``key`` is on this replica's disk and readable."""
        return self._index.held(key) is not None

    async def fence(self, block: str) -> list[str]:
        """Close ``block`` to appends, durably; the keys held for it (sorted)."""
        self._check_usable()
        if block in self._index.dropped:
            return []
        closing = self._closing_blocks.get(block)
        if closing is None:
            if self._index.closed(block):
                return self._index.keys_of(block)
            closing = self._enqueue_control(FENCE, block)
        await asyncio.shield(closing.future)
        return self._index.keys_of(block)

    async def drop(self, block: str) -> None:
        """Forget ``block``'s entries, durably, and take no more appends to it.

        A segment file is deleted once every block with entries in it is dropped.
        """
        self._check_usable()
        if block in self._index.dropped:
            return
        closing = self._closing_blocks.get(block)
        if closing is None or closing.type != DROP:
            closing = self._enqueue_control(DROP, block)
        await asyncio.shield(closing.future)

    def blocks(self) -> list[str]:
        """Blocks held now: with entries, or fenced."""
        return sorted(self._index.blocks)

    def used_bytes(self) -> int:
        """Bytes of segment files on disk."""
        return self._used_bytes

    def held_entries(self) -> int:
        return self._index.held_entries()

    def held_blocks(self) -> int:
        return len(self._index.blocks)

    async def close(self) -> None:
        """Finish what is queued, then release the files."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._writer is not None:
            await self._writer
        if self._reads:
            await asyncio.wait(set(self._reads))
        self._release_files()

    # -- the writer ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise WalError(f"WAL store {self.directory} is closed")

    def _check_usable(self) -> None:
        self._check_open()
        if self._failure is not None:
            raise self._failure

    def _blocked(self, block: str) -> bool:
        return block in self._closing_blocks or self._index.closed(block)

    def _enqueue(self, op: QueuedRecord) -> None:
        self._queue.append(op)
        self._queued_bytes += op.length
        self._wake.set()

    def _enqueue_control(self, rtype: int, block: str) -> QueuedRecord:
        op = QueuedRecord(rtype, block, "", [], 0)
        self._closing_blocks[block] = op
        self._enqueue(op)
        return op

    def _settle(self, op: QueuedRecord, failure: BaseException | None = None) -> None:
        if self._pending.get(op.key) is op:
            del self._pending[op.key]
        if self._closing_blocks.get(op.block) is op:
            del self._closing_blocks[op.block]
        self._queued_bytes -= op.length
        self._room.set()
        if failure is None:
            op.future.set_result(None)
        else:
            op.future.set_exception(failure)

    async def _check_same(self, held, block: str, key: str, chunks: list[memoryview], length: int) -> None:
        if held.block != block or held.length != length:
            raise WalError(f"entry {key!r} is held for block {held.block!r} with {held.length} bytes: "
                           f"an append of {length} bytes for block {block!r} conflicts")
        if length <= _INLINE_CRC_BYTES:
            crc = records.data_crc(chunks)
        else:
            crc = await asyncio.get_running_loop().run_in_executor(self._read_pool, records.data_crc, chunks)
        if crc != held.crc:
            raise WalError(f"entry {key!r} is held with other bytes")

    async def _write_loop(self) -> None:
        while True:
            if self._collect_due and self._failure is None:
                await self._collect()
            if not self._queue:
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch, self._queue = self._queue, []
            dropped = await self._commit(batch)
            if dropped:  # a drop returns once the segments it emptied are gone
                await self._collect()
                for op in dropped:
                    self._settle(op)

    async def _commit(self, batch: list[QueuedRecord]) -> list[QueuedRecord]:
        """Write ``batch`` in order with one ``fdatasync`` per segment written, then apply it.

        Settles every record but the DROPs written, which it returns.
        """
        runs: list[tuple[SegmentFile, int, list[QueuedRecord]]] = []
        for op in batch:
            if self._failure is not None:
                self._settle(op, self._failure)
                continue
            segment = self._active
            if segment is None or segment.room() < op.size:
                try:
                    segment = await self._roll(op.size, control=op.type != ENTRY)
                except WalFull as exc:
                    self._settle(op, exc)
                    continue
                except Exception as exc:
                    self._poison(exc)
                    self._settle(op, self._failure)
                    continue
            op.segment, op.position = segment, segment.end
            segment.end += op.size
            if runs and runs[-1][0] is segment:
                runs[-1][2].append(op)
            else:
                runs.append((segment, op.position, [op]))
        placed = [op for _, _, ops in runs for op in ops]
        if not placed:
            return []
        try:
            timings = await asyncio.get_running_loop().run_in_executor(self._writer_pool, write_batch, runs,
                                                                       self._direct)
        except Exception as exc:
            self._poison(exc)
            for op in placed:
                self._settle(op, self._failure)
            return []
        self.fsyncs += len(timings)
        for seconds in timings:
            metrics.FSYNC_SECONDS.observe(seconds)
        for op in placed:
            self._index.apply(op.type, op.block, op.key, op.segment.seq, op.data_position, op.length, op.crc)
            if op.type != DROP:
                self._settle(op)
        return [op for op in placed if op.type == DROP]

    async def _roll(self, size: int, *, control: bool) -> SegmentFile:
        capacity = max(self._segment_bytes, size)
        if self._used_bytes + capacity > self._max_bytes:
            if not control:
                raise WalFull(f"WAL directory {self.directory} is full: {self._used_bytes} bytes of segments, "
                              f"a new one of {capacity} would pass the limit of {self._max_bytes}")
            capacity = max(size, CONTROL_SEGMENT_BYTES)
        seq = self._next_seq
        self._next_seq += 1
        segment = await asyncio.get_running_loop().run_in_executor(
            self._writer_pool, segments.create, self.directory, seq, capacity)
        self._files[seq] = segment
        self._used_bytes += capacity
        self._index.add_segment(seq)
        self._active = segment
        self._collect_due = True  # the segment before may hold nothing live
        return segment

    async def _collect(self) -> None:
        """Delete the segments no live block has entries in, after writing again what still matters."""
        self._collect_due = False
        loop = asyncio.get_running_loop()
        for seq in self._index.deletable(self._active.seq if self._active else None):
            carried = [QueuedRecord(rtype, block, "", [], 0) for rtype, block in self._index.carry(seq)]
            if carried:
                for op in await self._commit(carried):
                    self._settle(op)
                if any(op.future.exception() for op in carried):
                    return  # tried again after the next drop
            segment = self._files.pop(seq)
            self._index.remove_segment(seq)
            self._used_bytes -= segment.capacity
            segment.deleted = True
            await loop.run_in_executor(self._writer_pool, segments.delete, segment)
            if segment.readers == 0:
                os.close(segment.fd)
            log.info("WAL directory %s: deleted segment %s (nothing live in it)", self.directory, segment.path.name)

    def _poison(self, exc: BaseException) -> None:
        log.error("WAL directory %s: writing failed, the replica refuses everything until reopened: %s",
                  self.directory, exc, exc_info=exc)
        self._failure = WalError(f"WAL directory {self.directory}: writing failed ({exc}); reopen the replica")
        for op in self._queue:
            self._settle(op, self._failure)
        self._queue = []

    def _release_files(self) -> None:
        for segment in self._files.values():
            if not segment.deleted:
                os.close(segment.fd)
        self._files.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
        self._writer_pool.shutdown(wait=False)
        self._read_pool.shutdown(wait=False)
        self._direct.close()
