"""The object WAL writer: many streams' appends become one object per flush.

Appends are buffered per stream and flushed as ONE object when the buffer reaches
``max_object_bytes`` or ``flush_interval`` after the first buffered append. A flush:

1. registers the object in the metadata plane (so a crash leaves a trace for GC),
2. puts the object (put-if-absent; durable when it returns),
3. waits until the previous flush finished committing (per-stream commit order
   must follow append order), then commits every stream's slice concurrently
   (one tail CAS each; the metadata engine group-commits them per shard),
4. completes each appender with its base offset, or with the error of its slice,
5. seals the object record with the slices that committed.

Uploads of successive flushes overlap; commits are strictly in flush order.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from ..meta import MetadataStore
from ..objstore import ObjectStore
from . import gc, metrics, wal_format
from .errors import InvalidAppend, StorageError, StreamFenced
from .records import IndexEntry
from .session import AppendSession

log = logging.getLogger(__name__)

#: Encoding and checksumming more than this moves to a worker thread.
_INLINE_ENCODE_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class WalOptions:
    max_object_bytes: int = 8 << 20
    flush_interval: float = 0.005
    max_inflight_flushes: int = 4
    max_entry_bytes: int = 64 << 20
    #: A commit round older than this is abandoned: GC may resolve the object by then.
    commit_deadline: float = 30.0


@dataclass(slots=True)
class _Pending:
    session: AppendSession
    entries: list[tuple[int, bytes | memoryview]] = field(default_factory=list)
    futures: list[asyncio.Future] = field(default_factory=list)


CommitListener = Callable[[int, IndexEntry, list[tuple[int, bytes | memoryview]]], None]


class WalWriter:
    """Buffers appends of every stream of one process and flushes them as objects."""

    def __init__(self, meta: MetadataStore, objects: ObjectStore, *, node_id: str,
                 options: WalOptions = WalOptions(), on_commit: CommitListener | None = None):
        self.meta = meta
        self.objects = objects
        self.node_id = node_id
        self.options = options
        self.on_commit = on_commit
        self._buffer: dict[int, _Pending] = {}
        self._buffered_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._seq = itertools.count()
        self._epoch = int(time.time() * 1000)
        self._last_commit: asyncio.Future | None = None
        self._slots = asyncio.Semaphore(options.max_inflight_flushes)
        self._flushes: set[asyncio.Task] = set()
        self._closed = False

    async def append(self, session: AppendSession, entry: bytes | memoryview, record_count: int) -> int:
        """Buffer one entry; returns its base offset once durable and committed."""
        if self._closed:
            raise StorageError("WAL writer is closed")
        if not isinstance(record_count, int) or record_count <= 0 or record_count > wal_format.MAX_RECORDS_PER_ENTRY:
            raise InvalidAppend(f"record_count must be a positive integer, got {record_count!r}")
        if not isinstance(entry, (bytes, bytearray, memoryview)):
            raise InvalidAppend(f"entry must be bytes, got {type(entry).__name__}")
        if len(entry) == 0 or len(entry) > self.options.max_entry_bytes:
            raise InvalidAppend(f"entry size {len(entry)} outside 1..{self.options.max_entry_bytes}")
        if session.fenced:
            raise StreamFenced(f"stream {session.stream_id} is fenced")
        pending = self._buffer.get(session.stream_id)
        if pending is None or pending.session is not session:
            if pending is not None:  # a new session replaced the old one mid-buffer
                self._flush_now()
            pending = self._buffer[session.stream_id] = _Pending(session)
        future = asyncio.get_running_loop().create_future()
        pending.entries.append((record_count, bytes(entry) if isinstance(entry, bytearray) else entry))
        pending.futures.append(future)
        self._buffered_bytes += len(entry) + wal_format.ENTRY_HEADER_SIZE
        if self._buffered_bytes >= self.options.max_object_bytes:
            self._flush_now()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.options.flush_interval, self._flush_now)
        return await future

    def _flush_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._buffer:
            return
        batch, self._buffer, self._buffered_bytes = list(self._buffer.values()), {}, 0
        previous = self._last_commit
        done = self._last_commit = asyncio.get_running_loop().create_future()
        task = asyncio.ensure_future(self._flush(batch, previous, done))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _flush(self, batch: list[_Pending], previous: asyncio.Future | None, done: asyncio.Future) -> None:
        try:
            async with self._slots:
                await self._write_and_commit(batch, previous)
        except BaseException as exc:  # every appender must hear about it
            for pending in batch:
                _fail(pending.futures, exc if isinstance(exc, Exception) else StorageError("flush cancelled"))
            if not isinstance(exc, Exception):
                raise
        finally:
            done.set_result(None)

    async def _write_and_commit(self, batch: list[_Pending], previous: asyncio.Future | None) -> None:
        key = f"wal/{self._epoch:013d}-{self.node_id}-{next(self._seq):010d}"
        slices = [(p.session.stream_id, p.entries) for p in batch]
        size = sum(len(e) for p in batch for _, e in p.entries)
        if size > _INLINE_ENCODE_BYTES:
            encoded = await asyncio.get_running_loop().run_in_executor(None, wal_format.encode_object, slices)
        else:
            encoded = wal_format.encode_object(slices)
        started = time.monotonic()
        await gc.register(self.meta, key, {p.session.stream_id: p.session.next_offset for p in batch})
        await self.objects.put_if_absent(key, encoded.chunks)
        metrics.WAL_OBJECTS.inc()
        metrics.WAL_OBJECT_BYTES.inc(encoded.size)
        if previous is not None:
            await previous
        if time.monotonic() - started > self.options.commit_deadline:
            raise StorageError(f"object {key} took too long to write; not committed")
        results = await asyncio.gather(
            *(self._commit_slice(p, key, layout) for p, layout in zip(batch, encoded.slices)),
            return_exceptions=True,
        )
        committed = [(p.session.stream_id, r.base) for p, r in zip(batch, results) if isinstance(r, IndexEntry)]
        metrics.FLUSH_SECONDS.observe(time.monotonic() - started)
        await self._seal(key, committed)

    async def _commit_slice(self, pending: _Pending, key: str, layout: wal_format.SliceLayout) -> IndexEntry:
        try:
            entry = await pending.session.commit(key, layout.position, layout.length, layout.entry_count,
                                                 layout.record_count)
        except Exception as exc:
            if isinstance(exc, StreamFenced):
                metrics.FENCED_SLICES.inc()
            _fail(pending.futures, exc)
            raise
        metrics.APPENDED_ENTRIES.inc(layout.entry_count)
        metrics.APPENDED_RECORDS.inc(layout.record_count)
        metrics.APPENDED_BYTES.inc(layout.length)
        if self.on_commit is not None:
            self.on_commit(pending.session.stream_id, entry, pending.entries)
        offset = entry.base
        for (count, _), future in zip(pending.entries, pending.futures):
            if not future.done():
                future.set_result(offset)
            offset += count
        return entry

    async def _seal(self, key: str, committed: list[tuple[int, int]]) -> None:
        try:
            await gc.seal(self.meta, key, committed)
        except Exception:  # GC resolves the object from its pending marker instead
            log.warning("could not seal object %s", key, exc_info=True)

    async def flush(self) -> None:
        """Flush what is buffered and wait for every flush in flight."""
        self._flush_now()
        while self._flushes:
            await asyncio.gather(*list(self._flushes), return_exceptions=True)

    async def close(self) -> None:
        self._closed = True
        await self.flush()


def _fail(futures: list[asyncio.Future], exc: Exception) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)
