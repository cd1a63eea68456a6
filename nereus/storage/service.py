"""StreamStorage: named streams over the object WAL, the offset index and GC.

One instance per process. It owns the WAL writer (shared by every stream the
process appends to), the caches, and the streams' handles.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from ..meta import EXPECT_ABSENT, MetadataError, MetadataStore, UnexpectedVersion
from ..meta import cas
from ..objstore import ObjectStore
from . import gc, key_view, records
from .api import AppendResult, FetchResult, FetchedEntry, Stream
from .cache import BlockCache, TailCache
from .errors import (InvalidStreamName, ObjectMissing, OffsetOutOfRange, StreamClosed, StreamExists,
                     StreamNotFound)
from .notifications import TailWatch
from .reader import StreamReader
from .records import IndexEntry, Tail
from .session import AppendSession, acquire
from .wal_locator import WalLocator
from .wal_replicas import OBJECT_STORE, Durability, ReplicaDirectory
from .wal_writer import WalOptions, WalWriter
from ..tasks import KeyedLocks, wait_for

log = logging.getLogger(__name__)

#: Stream ids reserved per counter update.
STREAM_ID_BLOCK = 64

#: What a tail waiter's future resolves to besides the committed end it was waiting for.
RECHECK = "recheck"  # notifications may have been missed: read the tail again
GONE = "gone"  # the stream's tail was deleted: the stream is gone


@dataclass(frozen=True, slots=True)
class StorageOptions:
    wal: WalOptions = WalOptions()
    tail_cache_bytes: int = 64 << 20
    block_cache_bytes: int = 128 << 20


class StreamStorage:
    """Creates, opens and deletes streams; one per process."""

    def __init__(self, meta: MetadataStore, objects: ObjectStore, *, node_id: str | None = None,
                 options: StorageOptions = StorageOptions(), directory: ReplicaDirectory | None = None,
                 durability: Durability = OBJECT_STORE):
        """``directory``: the WAL replicas this process may write to and read from;
        ``durability``: where streams' appends go unless opened with another."""
        self.meta = meta
        self.objects = objects
        self.node_id = node_id or uuid.uuid4().hex[:12]
        self.options = options
        self.directory = directory
        self.durability = durability
        self.tail_cache = TailCache(options.tail_cache_bytes)
        self.locator = WalLocator(meta, directory)
        self.reader = StreamReader(meta, objects, self.tail_cache, BlockCache(options.block_cache_bytes),
                                   self.locator)
        self._writers: dict[Durability, WalWriter] = {}
        self.writer = self.writer_for(durability)
        self._id_lock = asyncio.Lock()
        self._id_next = self._id_end = 0
        self.acquisitions = KeyedLocks()  # each handle's, while it takes an append session
        # stream id -> {future: offset}: the long-polls waiting for the stream to pass offset
        self._waiters: dict[int, dict[asyncio.Future, int]] = {}
        self._tail_reads: dict[int, asyncio.Task[None]] = {}  # one tail read per stream at a time
        self._tail_reread: set[int] = set()  # changed again while its read was in flight
        self.tail_watch = TailWatch(meta, on_change=self._tail_changed, on_gone=self._tail_gone,
                                    on_reset=self._recheck_all)
        # Called as ``listener(stream_id, start)`` after a trim raised a start offset (the
        # transaction layer drops the aborted ranges of trimmed records); failures are logged.
        self.trim_listeners: list[Callable[[int, int], Awaitable[None]]] = []

    def writer_for(self, durability: Durability) -> WalWriter:
        """The WAL writer of one durability (one per process, made on first use)."""
        writer = self._writers.get(durability)
        if writer is None:
            writer = WalWriter(self.meta, self.objects, node_id=self.node_id, options=self.options.wal,
                               on_commit=self._committed, durability=durability, directory=self.directory)
            self._writers[durability] = writer
            if writer.uploader is not None:
                self.locator.held.append(writer.uploader.held)
        return writer

    @property
    def writers(self) -> list[WalWriter]:
        return list(self._writers.values())

    @property
    def refusal(self) -> str | None:
        """Why writes are refused (a writer's store or WAL is out of space), None when they are taken."""
        return next((w.health.refusal for w in self._writers.values() if w.health.refusal is not None), None)

    # -- names ---------------------------------------------------------------------------
    async def create_stream(self, name: str, *, known_absent: bool = False) -> int:
        """Create a stream; returns its id. Raises StreamExists. ``known_absent``: the caller just
        found no stream of that name (its name record is not read again)."""
        _check_name(name)
        if not known_absent and await self.meta.get(records.name_key(name)) is not None:
            raise StreamExists(name)
        stream_id = await self._allocate_stream_id()
        await self.meta.put(records.meta_key(stream_id),
                            records.encode({"name": name, "created": int(time.time() * 1000)}),
                            partition_key=records.stream_partition(stream_id))
        try:
            await self.meta.put(records.name_key(name), records.encode({"id": stream_id}),
                                expected_version_id=EXPECT_ABSENT)
        except UnexpectedVersion:
            # Created meanwhile by someone else: this id's record names a stream that never was.
            with contextlib.suppress(MetadataError):
                await self.meta.delete(records.meta_key(stream_id), partition_key=records.stream_partition(stream_id))
            raise StreamExists(name) from None
        return stream_id

    async def _allocate_stream_id(self) -> int:
        """A stream id never handed out before, from a block this process reserved.

        Blocks (one CAS on the counter each) keep many creations at once, here and on
        other brokers, from racing on one key; ids of a block left unused are skipped.
        """
        async with self._id_lock:
            if self._id_next >= self._id_end:
                allocated = await cas.update(
                    self.meta, records.NEXT_STREAM_ID_KEY,
                    lambda old: records.encode({"next": records.decode(old).get("next", 1) + STREAM_ID_BLOCK}),
                )
                self._id_end = records.decode(allocated.value)["next"]
                self._id_next = self._id_end - STREAM_ID_BLOCK
            self._id_next += 1
            return self._id_next - 1

    async def stream_id(self, name: str) -> int:
        rec = await self.meta.get(records.name_key(name))
        if rec is None:
            raise StreamNotFound(name)
        return records.decode(rec.value)["id"]

    async def stream_ids(self, names: Sequence[str]) -> list[int | None]:
        """``stream_id`` of each name (None: no such stream), read together."""
        found = await self.meta.get_many([records.name_key(name) for name in names])
        return [records.decode(rec.value)["id"] if rec is not None else None for rec in found]

    async def exists(self, stream_id: int) -> bool:
        """Whether a stream with this id exists (its record goes last when it is deleted)."""
        rec = await self.meta.get(records.meta_key(stream_id), partition_key=records.stream_partition(stream_id))
        return rec is not None

    async def list_streams(self, prefix: str = "", *, exclude: re.Pattern | None = None) -> list[str]:
        """Names of the streams whose names start with ``prefix`` (in key order).

        ``exclude``: names it finds (``search``) are left out before they are decoded. Their
        keys hold the names URL-quoted, so it must only match characters quoting leaves alone
        (letters, digits, ``-._~``), as ``-partition-\\d+$`` does.
        """
        lo, hi = records.names_range(prefix)
        if exclude is None:
            return [records.name_from_key(k) async for k in self.meta.list(lo, hi)]
        return [records.name_from_key(k) async for k in self.meta.list(lo, hi) if not exclude.search(k)]

    async def list_streams_page(self, prefix: str = "", *, start_after: str | None = None,
                                limit: int = 1000) -> list[str]:
        """At most ``limit`` names of ``list_streams(prefix)``, those after the name ``start_after``."""
        lo, hi = records.names_range(prefix)
        after = records.name_key(start_after) if start_after is not None else None
        return [records.name_from_key(k) for k in await self.meta.list_page(lo, hi, start_after=after, limit=limit)]

    async def open_stream(self, name: str, *, create: bool = False, likely_absent: bool = False,
                          durability: Durability | None = None) -> "StreamHandle":
        """A handle on a stream; its append session is acquired on the first append.

        ``likely_absent`` (with ``create``): the caller found no stream of that name just now, so
        it is created without reading its name record first (read only if it exists after all).
        ``durability``: where its appends go (default: the storage's)."""
        created = False
        try:
            if create and likely_absent:
                raise StreamNotFound(name)
            stream_id = await self.stream_id(name)
        except StreamNotFound:
            if not create:
                raise
            try:
                stream_id = await self.create_stream(name, known_absent=True)
                created = True
            except StreamExists:
                stream_id = await self.stream_id(name)
        return StreamHandle(self, stream_id, name, durability or self.durability, created=created)

    async def delete_stream(self, name: str) -> None:
        """Fence any writer, drop the stream's index and release its objects."""
        stream_id = await self.stream_id(name)
        partition = records.stream_partition(stream_id)
        await acquire(self.meta, stream_id, f"{self.node_id}-delete")
        await self.meta.delete(records.name_key(name))
        tail = await self.tail(stream_id)
        await self._release_index(stream_id, 10**records.OFFSET_WIDTH - 1)
        await key_view.drop(self.meta, stream_id)
        by_object: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for entry in tail.pending:  # releases are idempotent: overlap with idx groups is fine
            by_object[entry.object].append((stream_id, entry.base))
        await asyncio.gather(*(gc.release(self.meta, key, pairs) for key, pairs in by_object.items()))
        for lo, hi in records.subtree_ranges(partition):
            await self.meta.delete_range(lo, hi, partition_key=partition)
        self.tail_cache.drop(stream_id)

    # -- shared by handles ---------------------------------------------------------------
    async def tail(self, stream_id: int) -> Tail:
        rec = await self.meta.get(records.tail_key(stream_id), partition_key=records.stream_partition(stream_id))
        return Tail.decode(rec.value) if rec is not None else Tail(0, 0, 0)

    async def tails(self, stream_ids: Sequence[int]) -> list[Tail]:
        """``tail`` of each stream, read together."""
        found = await self.meta.get_many([records.tail_key(i) for i in stream_ids],
                                         partition_keys=[records.stream_partition(i) for i in stream_ids])
        return [Tail.decode(rec.value) if rec is not None else Tail(0, 0, 0) for rec in found]

    async def start(self, stream_id: int) -> int:
        rec = await self.meta.get(records.start_key(stream_id), partition_key=records.stream_partition(stream_id))
        return records.decode(rec.value)["start"] if rec is not None else 0

    async def trim(self, stream_id: int, new_start: int) -> int:
        """Raise the start offset (never lowers it); returns the start now in force."""
        tail = await self.tail(stream_id)
        if new_start < 0 or new_start > tail.next:
            raise OffsetOutOfRange(f"trim to {new_start} outside [0, {tail.next}]")
        result = await cas.update(
            self.meta, records.start_key(stream_id),
            lambda old: None if old and records.decode(old)["start"] >= new_start
            else records.encode({"start": new_start}),
            partition_key=records.stream_partition(stream_id),
        )
        start = records.decode(result.value)["start"]
        for listener in list(self.trim_listeners):
            try:
                await listener(stream_id, start)
            except Exception as exc:  # the trim stands; the next trim or abort marker retries
                log.warning("stream %d: a trim listener failed at start %d: %s", stream_id, start, exc)
        # Groups overlapping tail.pending stay: a group write in flight (or one a new
        # session makes from the tail) could otherwise resurrect them after release.
        limit = min(start, tail.pending[0].base if tail.pending else tail.next)
        await self._release_index(stream_id, limit - 1)
        return start

    async def _release_index(self, stream_id: int, last_offset: int) -> set[tuple[str, int]]:
        """Delete idx groups ending at or below ``last_offset``; release their objects."""
        if last_offset < 0:
            return set()
        partition = records.stream_partition(stream_id)
        lo, hi = records.index_range(stream_id, 0, last_offset)
        by_object: dict[str, list[tuple[int, int]]] = defaultdict(list)
        released: set[tuple[str, int]] = set()
        async for rec in self.meta.range_scan(lo, hi, partition_key=partition):
            try:
                await self.meta.delete(rec.key, expected_version_id=rec.version.version_id, partition_key=partition)
            except UnexpectedVersion:
                continue  # replaced concurrently; its new owner releases it
            for entry in records.decode_group(rec.value):
                by_object[entry.object].append((stream_id, entry.base))
                released.add((entry.object, entry.base))
        await asyncio.gather(*(gc.release(self.meta, key, pairs) for key, pairs in by_object.items()))
        return released

    # -- tail waiters -------------------------------------------------------------------
    def _committed(self, stream_id: int, entry: IndexEntry, entries: list) -> None:
        self.tail_cache.add(stream_id, entry.base, entries)
        self._wake(stream_id, entry.base + entry.records)

    def add_waiter(self, stream_id: int, offset: int) -> asyncio.Future:
        """A future resolved once the stream's committed end passes ``offset``.

        It resolves to that end (an int), to ``RECHECK`` (changes may have been missed:
        read the tail) or to ``GONE`` (the stream was deleted). The caller must
        ``remove_waiter`` it when its wait ends, however it ends.
        """
        future = asyncio.get_running_loop().create_future()
        waiters = self._waiters.get(stream_id)
        if waiters is None:
            waiters = self._waiters[stream_id] = {}
            self.tail_watch.watch(stream_id)
        waiters[future] = offset
        return future

    def remove_waiter(self, stream_id: int, future: asyncio.Future) -> None:
        """Forget a waiter (idempotent); a stream without waiters is no longer watched."""
        waiters = self._waiters.get(stream_id)
        if waiters is not None and waiters.pop(future, None) is not None and not waiters:
            self._drop_waiters(stream_id)

    def waiter_count(self) -> int:
        """Tail waiters registered now, over every stream."""
        return sum(len(w) for w in self._waiters.values())

    def _drop_waiters(self, stream_id: int) -> None:
        del self._waiters[stream_id]
        self.tail_watch.unwatch(stream_id)

    def _wake(self, stream_id: int, end: int) -> None:
        """Resolve the waiters below ``end`` (the stream's committed end) with it."""
        waiters = self._waiters.get(stream_id)
        if not waiters:
            return
        woken = [f for f, offset in waiters.items() if offset < end]
        for future in woken:
            del waiters[future]
            if not future.done():
                future.set_result(end)
        if not waiters:
            self._drop_waiters(stream_id)

    def _resolve_all(self, stream_id: int, result: str) -> None:
        waiters = self._waiters.get(stream_id)
        if not waiters:
            return
        for future in waiters:
            if not future.done():
                future.set_result(result)
        self._drop_waiters(stream_id)

    def _tail_changed(self, stream_id: int) -> None:
        """Another writer (or this one) moved the tail: read it once, wake who it passes."""
        if stream_id not in self._waiters:
            return
        if stream_id in self._tail_reads:
            self._tail_reread.add(stream_id)  # read again when the one in flight ends
            return
        task = asyncio.get_running_loop().create_task(self._read_tail(stream_id))
        self._tail_reads[stream_id] = task
        task.add_done_callback(lambda t: self._tail_read_done(stream_id, t))

    async def _read_tail(self, stream_id: int) -> None:
        while stream_id in self._waiters:
            self._tail_reread.discard(stream_id)
            try:
                tail = await self.tail(stream_id)
            except Exception as e:  # the waiters re-check on their own timeout
                log.warning("reading the tail of stream %d after a notification failed: %s", stream_id, e)
                return
            self._wake(stream_id, tail.next)
            if stream_id not in self._tail_reread:
                return

    def _tail_read_done(self, stream_id: int, task: asyncio.Task[None]) -> None:
        if self._tail_reads.get(stream_id) is task:
            del self._tail_reads[stream_id]
        self._tail_reread.discard(stream_id)
        if not task.cancelled() and task.exception() is not None:
            log.error("tail read of stream %d failed", stream_id, exc_info=task.exception())

    def _tail_gone(self, stream_id: int) -> None:
        """The stream's tail was deleted elsewhere: its cached entries are stale, waiters look."""
        self.tail_cache.drop(stream_id)
        self._resolve_all(stream_id, GONE)

    def _recheck_all(self) -> None:
        """Notifications may have been missed (a new subscription): every waiter re-checks once."""
        for stream_id in list(self._waiters):
            self._resolve_all(stream_id, RECHECK)

    async def close(self) -> None:
        await self.tail_watch.close()
        reads = list(self._tail_reads.values())
        for task in reads:
            task.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
        await asyncio.gather(*(writer.close() for writer in self.writers))


class StreamHandle(Stream):
    """One stream as seen by this process: appends (with a session) and reads."""

    __slots__ = ("storage", "stream_id", "name", "durability", "_writer", "_switching", "_session",
                 "_start", "_next", "_closed", "created", "_unread", "_session_unread")

    def __init__(self, storage: StreamStorage, stream_id: int, name: str, durability: Durability = OBJECT_STORE,
                 *, created: bool = False):
        """``created``: this handle's ``open_stream`` created the stream, so it has no tail, start
        or session record yet (ids are never reused): the first refresh and session take read none."""
        self.storage = storage
        self.stream_id = stream_id
        self.name = name
        self.durability = durability
        self._writer = storage.writer_for(durability)
        self._switching: asyncio.Future | None = None
        self._session: AppendSession | None = None
        self._start = 0
        self._next = 0
        self._closed = False
        self.created = created
        # A created stream's first refresh reads nothing, and its first session is taken without
        # reads (writes that expect the records absent: a writer that came meanwhile fails them).
        self._unread = self._session_unread = created

    def start_offset(self) -> int:
        return self._start

    def next_offset(self) -> int:
        session = self._session
        return session.next_offset if session is not None and session.usable else self._next

    @property
    def writable(self) -> bool:
        return not self._closed and self._session is not None and self._session.usable

    @property
    def fencing_token(self) -> int | None:
        return self._session.token if self._session is not None else None

    async def refresh(self) -> None:
        if self._unread:
            self._unread = False
            return
        if self.writable:  # its own appends are the committed end
            self._start = await self.storage.start(self.stream_id)
            return
        tail, start = await asyncio.gather(self.storage.tail(self.stream_id), self.storage.start(self.stream_id))
        self._start = start
        if not self.writable:
            self._next = max(self._next, tail.next)

    def _acquisition(self):
        return self.storage.acquisitions.hold(self)

    async def acquire(self) -> None:
        """Take a new append session now, fencing any other writer (and this handle's old one)."""
        if self._closed:
            raise StreamClosed(self.name)
        async with self._acquisition():
            await self._take_session()

    async def _take_session(self) -> None:
        self._unread = False  # from now on a refresh reads (another writer may have come)
        if self._session_unread:
            self._session_unread = False
            session = await acquire(self.storage.meta, self.stream_id, self.storage.node_id, new_stream=True)
            start = self._start
        else:
            session, start = await asyncio.gather(acquire(self.storage.meta, self.stream_id, self.storage.node_id),
                                                  self.storage.start(self.stream_id))
        self._next = session.next_offset
        self._session = session
        self._start = start

    async def append(self, entry: bytes | memoryview, record_count: int) -> AppendResult:
        """Append under this handle's session, taking one on the very first append.

        A session that was fenced or lost is never replaced here: appends keep failing
        (StreamFenced / AppendSessionLost) until the owner calls ``acquire`` again.
        """
        if self._closed:
            raise StreamClosed(self.name)
        if self._session is None:
            async with self._acquisition():
                if self._session is None:
                    await self._take_session()
        while self._switching is not None:
            await asyncio.shield(self._switching)
        base = await self._writer.append(self._session, entry, record_count)
        return AppendResult(base)

    async def set_durability(self, durability: Durability) -> None:
        """Send later appends to ``durability``'s WAL. Appends wait while the ones made
        before are flushed: a stream's commits happen in its append order."""
        if durability == self.durability:
            return
        while self._switching is not None:
            await asyncio.shield(self._switching)
        self._switching = asyncio.get_running_loop().create_future()
        try:
            await self._writer.flush()
        finally:
            self.durability, self._writer = durability, self.storage.writer_for(durability)
            self._switching.set_result(None)
            self._switching = None

    async def fetch(self, start: int, end: int | None = None, max_bytes: int = 1 << 20) -> FetchResult:
        if self._closed:
            raise StreamClosed(self.name)
        if start < self._start or start >= self.next_offset():
            await self.refresh()
        next_offset = self.next_offset()
        if start < self._start or start > next_offset:
            raise OffsetOutOfRange(f"{self.name}: offset {start} outside [{self._start}, {next_offset}]")
        end = next_offset if end is None else min(end, next_offset)
        if start >= end:
            return FetchResult([], self._start, next_offset)
        try:
            entries = await self.storage.reader.read(self.stream_id, start, end, max_bytes)
        except ObjectMissing:
            await self.refresh()
            if start < self._start:  # trimmed while we read
                raise OffsetOutOfRange(f"{self.name}: offset {start} was trimmed") from None
            raise
        return FetchResult(entries, self._start, next_offset)

    async def wait_for(self, offset: int, timeout: float) -> bool:
        """Wait until records at ``offset`` are committed (True) or ``timeout`` passes.

        Commits of this process and, through the metadata plane's notifications, of
        every other process wake the wait. True also when the stream was deleted
        meanwhile: the caller's next fetch tells what happened.
        """
        if self.next_offset() > offset:
            return True
        storage = self.storage
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        # Once the notifications are live, a tail read after registering closes the gap
        # between our last look at the tail and the registration. Until then the new
        # subscription makes every waiter re-check (RECHECK).
        check = storage.tail_watch.live and not self.writable
        while True:
            future = storage.add_waiter(self.stream_id, offset)
            try:
                if check and await self._observe_tail() > offset:
                    return True
                result = await wait_for(future, max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                await self.refresh()
                return self.next_offset() > offset
            finally:
                storage.remove_waiter(self.stream_id, future)
            if result == GONE:
                return True
            if result == RECHECK:
                check = True
                continue
            self._observed(result)
            return True

    async def _observe_tail(self) -> int:
        """Read the committed end from the metadata plane; returns next_offset() after it."""
        self._observed((await self.storage.tail(self.stream_id)).next)
        return self.next_offset()

    def _observed(self, committed_end: int) -> None:
        if not self.writable:
            self._next = max(self._next, committed_end)

    async def trim(self, new_start: int) -> None:
        self._start = await self.storage.trim(self.stream_id, new_start)

    async def close(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._writer.flush()
            await self._session.close()
            self._next = self.next_offset()
            # The writer is done here (the stream may move to another broker): its cached tail goes too.
            self.storage.tail_cache.drop(self.stream_id)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or len(name) > 1024 or "\x00" in name:
        raise InvalidStreamName(f"invalid stream name {name!r}")


__all__ = ["StreamStorage", "StreamHandle", "StorageOptions", "FetchedEntry"]
