"""The object WAL writer: many streams' appends become one object per flush.

Appends are buffered per stream and flushed as ONE object (group commit). A flush
goes through two stages: its write (the object put, or the WAL replicas' quorum),
then its commit (after the previous flush's). When does a flush start?

* Nothing is ahead of the commit stage (no flush writing or waiting for its turn to
  commit): at once, one loop turn after the append, so that the appends of requests
  read in the same turn share the object. An unbatched producer waits for one write
  and one commit, never for a timer.
* A flush reaches its commit turn: what was buffered meanwhile starts writing, so
  one flush writes while another commits (a pipeline two deep, which keeps the
  commit stage busy without piling up objects that wait for it).
* Otherwise the buffer waits: until it reaches ``max_object_bytes``, or for
  ``flush_interval`` after its first append (so a slow store, whose writes take
  longer than commits, keeps several flushes overlapping under load; on a store
  whose puts take many flush intervals, the interval is a ``puts_per_put_time``-th
  of the median put time).
* Every flush slot is busy: the buffer waits for the next one to finish. There are
  ``max_inflight_flushes`` slots, more on a store whose puts take longer than a flush
  interval (up to ``max_slow_store_flushes``, while the flushes in flight hold less
  than ``max_buffered_bytes``): enough that appends wait for the puts ahead of
  theirs, not for a slot.

A flush:

1. takes the object's name from a block of names reserved in the metadata plane
   beforehand (so a crash leaves a trace for GC without a metadata write per object),
2. puts the object (put-if-absent; durable when it returns); on a remote store a put
   slower than most of the recent ones is raced by a second put of the same bytes
   under the next name, and the first to land is the one committed (``put_timing``),
3. waits until the previous flush finished committing (per-stream commit order
   must follow append order), then commits every stream's slice with ONE
   ``put_many`` (a tail CAS per stream, plus an idx group write every 8th commit;
   the metadata engine applies them in one synced transaction per shard); the same
   ``put_many`` creates the object's sealed record naming those slices,
4. completes each appender with its base offset, or with the error of its slice,
5. off the ack path: releases the slices that surely did not commit from the sealed
   record, or seals it the slow way if its create failed (a release or the collector
   wrote the record first).

A failed flush loses the append sessions of its streams (``AppendSessionLost``), so
no append behind a failed one commits: a stream's committed order is always its
append order. Every second the writer also groups the pending slices of streams
that went quiet (``AppendSession.write_idle_group``), in the same commit order.

Safety against the collector does not depend on timing: a collector that resolves
a block it thinks dead first claims each unwritten name (put-if-absent of a
tombstone, so a late put fails) and fences the tails of the streams in the written
ones (so a late commit fails); see ``gc``.

Writes of successive flushes may overlap; commits are strictly in flush order. At
most ``max_inflight_flushes`` run at once; while they are busy the buffer keeps
growing into the next flush, up to ``max_buffered_bytes`` (then appends wait:
back-pressure). ``nereus_storage_flush_stage_seconds`` shows where a flush's time goes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable

from ..meta import MetadataStore, UnexpectedVersion
from ..objstore import ObjectExists, ObjectStore
from ..tasks import log_failure
from ..wal.errors import BlockFenced
from . import gc, metrics, wal_format, wal_groups
from .errors import InvalidAppend, StorageError, StreamFenced
from .put_timing import PutTiming
from .records import IndexEntry
from .session import AppendSession
from .wal_blocks import NameBlock, NameBlocks
from .wal_replica_writes import ReplicaWrites
from .wal_replicas import OBJECT_STORE, Durability, ReplicaDirectory, WalUnavailable
from .wal_upload import Uploader
from .write_health import WriteHealth

log = logging.getLogger(__name__)

#: Encoding and checksumming more than this moves to a worker thread.
_INLINE_ENCODE_BYTES = 1 << 20
_QUEUED, _WRITE, _ORDERED, _COMMIT = (metrics.FLUSH_STAGE_SECONDS.labels(stage) for stage in metrics.FLUSH_STAGES)
#: Objects whose chunks average less than this are joined into one buffer before the put.
_JOIN_BELOW_AVERAGE_CHUNK = 4096
#: At close, how long uploads may take before the rest is left to the collector.
_CLOSE_UPLOAD_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class WalOptions:
    max_object_bytes: int = 8 << 20
    #: How long appends made while flushes are in flight may wait for a flush of their
    #: own (an idle WAL flushes at once, and a flush reaching its commit turn starts the next).
    flush_interval: float = 0.005
    max_inflight_flushes: int = 4
    #: On a store whose puts take longer than ``flush_interval`` times this, the interval
    #: grows to the median put time over this: a flush's put overlaps about this many others
    #: (a commit waits for every put before its own, and each more in flight lengthens that
    #: wait's tail), and the store gets fewer, larger objects.
    puts_per_put_time: int = 6
    #: The most flushes in flight on a store whose puts take longer than ``flush_interval``.
    max_slow_store_flushes: int = 32
    #: A put still unanswered after this quantile of the recent put times is raced by a
    #: second one, on stores where that helps (0: never); at most ``put_race_budget`` of flushes.
    put_race_quantile: float = 0.95
    put_race_budget: float = 0.1
    #: Appends wait while this much is buffered behind busy flushes.
    max_buffered_bytes: int = 64 << 20
    max_entry_bytes: int = 64 << 20
    #: Object names are reserved in blocks of this many, each used for at most
    #: ``reservation_ttl`` after it was reserved (the collector treats blocks older
    #: than its pending timeout, 60 s by default, as a dead writer's).
    reservation_size: int = 256
    reservation_ttl: float = 10.0
    #: How often quiet streams' old pending slices are grouped into the offset index.
    idle_group_interval: float = 1.0
    #: On WAL replicas: appends wait while this much is acknowledged but not uploaded yet ...
    max_unuploaded_bytes: int = 1 << 30
    #: ... of which up to this much stays in memory for the upload (the rest is read back).
    upload_memory_bytes: int = 128 << 20
    upload_concurrency: int = 64  # object stores take many concurrent PUTs; each waits tens of ms
    #: On WAL replicas: a block of names is closed this long after its first use, and its
    #: objects uploaded as one (``wal_groups``); 0: each object uploaded on its own.
    upload_group_seconds: float = 0.5
    upload_group_bytes: int = 64 << 20  # ... or once this much was written under its names
    #: Blocks whose marker is older than this are touched (the collector's timeout is 60 s).
    marker_touch_seconds: float = 15.0


@dataclass(slots=True)
class _Pending:
    session: AppendSession
    entries: list[tuple[int, bytes | memoryview]] = field(default_factory=list)
    futures: list[asyncio.Future] = field(default_factory=list)
    buffered_at: float = field(default_factory=time.monotonic)  # of the first entry


@dataclass(slots=True)
class _CommitRound:
    """What one flush's commit round did, for the object's seal."""

    committed: list[tuple[int, int]] = field(default_factory=list)  # (stream id, base) of committed slices
    #: Slices the round's seal names that surely did not commit (their tail CAS failed).
    not_committed: list[tuple[int, int]] = field(default_factory=list)
    sealed: bool = False  # the round's seal landed


class _CommitTurn:
    """Marks (once) that a flush stopped being ahead of the commit stage: its commit starts, or it failed."""

    __slots__ = ("writer", "pending")

    def __init__(self, writer: "WalWriter") -> None:
        self.writer = writer
        self.pending = True

    def reached(self) -> None:
        if self.pending:
            self.pending = False
            self.writer._commit_turn_reached()


CommitListener = Callable[[int, IndexEntry, list[tuple[int, bytes | memoryview]]], None]


class WalWriter:
    """Buffers appends of every stream of one process and flushes them as objects."""

    def __init__(self, meta: MetadataStore, objects: ObjectStore, *, node_id: str,
                 options: WalOptions = WalOptions(), on_commit: CommitListener | None = None,
                 health: WriteHealth | None = None, durability: Durability = OBJECT_STORE,
                 directory: ReplicaDirectory | None = None):
        """``durability``: where objects go before the ack (the object store, or WAL
        replicas from ``directory``, uploaded in the background)."""
        self.meta = meta
        self.objects = objects
        self.node_id = node_id
        self.durability = durability
        self.directory = directory
        if durability.on_replicas and directory is None:
            raise StorageError(f"the {durability.profile} WAL profile needs WAL replicas, and none are configured")
        self.replicas = ReplicaWrites(durability, directory, node_id) if durability.on_replicas else None
        # Refusing while out of space; on WAL replicas the probe writes there.
        self.health = health or WriteHealth(meta, objects, node_id=node_id,
                                            probe=self.replicas.probe if self.replicas is not None else None)
        self.options = options
        self.on_commit = on_commit
        self._buffer: dict[int, _Pending] = {}
        self._buffered_bytes = 0
        self._timer: asyncio.TimerHandle | None = None
        self._soon: asyncio.Handle | None = None  # the flush of an idle WAL, one loop turn away
        prefix = f"wal/{int(time.time() * 1000):013d}-{node_id}"
        choose = None
        grouped = self.replicas is not None and options.upload_group_seconds > 0
        if self.replicas is not None:
            prefix += f"~{durability.ensemble}.{durability.write_quorum}.{durability.ack_quorum}"
            choose = self.replicas.choose_ensemble
        prefix = wal_groups.grouped_prefix(prefix, options.reservation_size) if grouped else prefix + "-"
        self.uploader = Uploader(objects, directory, meta, max_held_bytes=options.max_unuploaded_bytes,
                                 memory_bytes=options.upload_memory_bytes, concurrency=options.upload_concurrency,
                                 grouped=grouped) if durability.on_replicas else None
        self.blocks = NameBlocks(meta, prefix, size=options.reservation_size, ttl=options.reservation_ttl,
                                 choose=choose, write_quorum=durability.write_quorum,
                                 ack_quorum=durability.ack_quorum, track=self._track, on_done=self._block_done,
                                 on_closed=self.uploader.closed if grouped else None,
                                 group_seconds=options.upload_group_seconds if grouped else 0.0,
                                 group_bytes=options.upload_group_bytes)
        if self.uploader is not None:
            self.uploader.blocks = self.blocks
        self._last_commit: asyncio.Future | None = None
        self._inflight = 0  # flushes not finished (writing or committing)
        self._inflight_bytes = 0
        racing = objects.hedge_slow_puts and options.put_race_quantile > 0
        self.put_timing = PutTiming(hedging=racing, quantile=options.put_race_quantile if racing else 0.5,
                                    budget=options.put_race_budget)
        self._ahead = 0  # flushes writing their object or waiting for their turn to commit
        self._flush_wanted = False
        self._space = asyncio.Event()
        self._space.set()
        self._flushes: set[asyncio.Task] = set()
        self._losing_puts: set[asyncio.Future] = set()  # raced puts that lost, not over yet
        self._start_waiters: list[asyncio.Future] = []  # callers of flush() waiting for a free slot
        self._closed = False
        # Sessions with pending slices that may need grouping when their stream goes quiet.
        self._sessions: dict[int, AppendSession] = {}
        self._housekeeping: asyncio.Task | None = None

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
        session.check_usable()
        if self._housekeeping is None:
            self._housekeeping = asyncio.ensure_future(self._group_idle_streams())
        if self.uploader is not None:
            await self.uploader.room()  # back-pressure: the object store is behind (or down)
        while self._buffered_bytes >= self.options.max_buffered_bytes:
            self._space.clear()  # back-pressure: every flush slot is busy and the buffer is full
            await self._space.wait()
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
        elif self._ahead == 0:
            if self._soon is None:  # nothing ahead of the commit stage: flush once this loop turn's appends are in
                self._soon = asyncio.get_running_loop().call_soon(self._flush_now)
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_interval(), self._flush_now)
        return await future

    def _flush_now(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._soon is not None:
            self._soon.cancel()
            self._soon = None
        if not self._buffer:
            return
        if not self._slot_free():
            # Busy: keep buffering. The next flush starts when one finishes and
            # carries everything buffered meanwhile (group commit under load).
            self._flush_wanted = True
            return
        self._flush_wanted = False
        batch, size = list(self._buffer.values()), self._buffered_bytes
        self._buffer, self._buffered_bytes = {}, 0
        self._space.set()
        previous = self._last_commit
        done = self._last_commit = asyncio.get_running_loop().create_future()
        self._inflight += 1
        self._inflight_bytes += size
        self._ahead += 1
        self._track(self._flush(batch, size, previous, done, _CommitTurn(self)))
        waiters, self._start_waiters = self._start_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _flush_interval(self) -> float:
        return self.put_timing.interval(self.options.flush_interval, self.options.puts_per_put_time)

    def _slot_free(self) -> bool:
        options = self.options
        if self._inflight < options.max_inflight_flushes:
            return True
        return (self._inflight < self.put_timing.slots(self._flush_interval(), options.max_inflight_flushes,
                                                       options.max_slow_store_flushes)
                and self._inflight_bytes < options.max_buffered_bytes)

    def _track(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        task.add_done_callback(log_failure("a WAL flush step"))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    def _commit_turn_reached(self) -> None:
        self._ahead -= 1
        if self._buffer and self._ahead == 0:
            self._flush_now()  # what came meanwhile is written while this commit runs

    def _flush_finished(self, size: int) -> None:
        self._inflight -= 1
        self._inflight_bytes -= size
        if self._buffer and (self._inflight == 0 or self._flush_wanted
                             or self._buffered_bytes >= self.options.max_object_bytes):
            self._flush_now()  # idle again, a flush was due while every slot was busy, or a full buffer

    async def _flush(self, batch: list[_Pending], size: int, previous: asyncio.Future | None,
                     done: asyncio.Future, turn: _CommitTurn) -> None:
        try:
            await self._write_and_commit(batch, previous, done, turn)
            if self.health.refusal is not None:
                self.health.succeeded()
        except BaseException as exc:  # every appender must hear about it
            self.health.failed(exc, sum(len(e) for p in batch for _, e in p.entries))
            for pending in batch:
                # Before ``done`` is set: the next flush may not commit these streams.
                pending.session.lose(exc)
                _fail(pending.futures, exc if isinstance(exc, Exception) else StorageError("flush cancelled"))
            if not isinstance(exc, Exception):
                raise
        finally:
            if not done.done():
                done.set_result(None)
            turn.reached()
            self._flush_finished(size)

    async def _write_and_commit(self, batch: list[_Pending], previous: asyncio.Future | None,
                                done: asyncio.Future, turn: _CommitTurn) -> None:
        key, block = await self.blocks.next_name()
        round_ = _CommitRound()
        chunks: list = []
        try:
            slices = [(p.session.stream_id, p.entries) for p in batch]
            hints = [p.session.next_offset for p in batch]
            size = sum(len(e) for p in batch for _, e in p.entries)
            if size > _INLINE_ENCODE_BYTES:
                encoded = await asyncio.get_running_loop().run_in_executor(None, wal_format.encode_object, slices,
                                                                           hints)
            else:
                encoded = wal_format.encode_object(slices, hints)
            started = time.monotonic()
            _QUEUED.observe(started - min(p.buffered_at for p in batch))
            # Many small entries travel as one buffer: one C-level join beats handing the store
            # hundreds of small chunks to walk through in Python. Large entries (a producer's
            # batches) are not copied: the store writes them where they are.
            chunks = encoded.chunks
            if encoded.size < _JOIN_BELOW_AVERAGE_CHUNK * len(chunks):
                chunks = [b"".join(chunks)]
            if block.ensemble:
                key, block = await self._write_replicas(key, block, chunks)
                block.written += encoded.size
            else:
                key, block = await self._put_object(key, block, chunks)
            written = time.monotonic()
            _WRITE.observe(written - started)
            metrics.WAL_OBJECTS.inc()
            metrics.WAL_OBJECT_BYTES.inc(encoded.size)
            metrics.WAL_FLUSH_BYTES.observe(encoded.size)
            if previous is not None:
                await previous
            committing = time.monotonic()
            _ORDERED.observe(committing - written)
            turn.reached()
            await self._commit_all(batch, key, encoded.slices, round_)
            committed_at = time.monotonic()
            metrics.COMMIT_SECONDS.observe(committed_at - committing)
            _COMMIT.observe(committed_at - committing)
            done.set_result(None)  # the next flush may commit now; sealing is off the ack path
            metrics.FLUSH_SECONDS.observe(time.monotonic() - started)
        finally:
            # Every name handed out gets sealed, failed ones with no live slice, so
            # the block's marker can go and a half-written object is collected.
            self._track(self._seal(key, round_, block, chunks))

    async def _put_object(self, key: str, block: NameBlock, chunks: list) -> tuple[str, NameBlock]:
        for attempt in range(3):
            try:
                return await self._put_raced(key, block, chunks)
            except ObjectExists:
                # The collector claimed the name (it took this block for a dead
                # writer's after a stall): the block is lost; write under a new name.
                if attempt == 2:
                    raise
                log.warning("object name %s was claimed by the collector; taking a new block", key)
                block.claimed = True
                self._track(self._seal(key, _CommitRound(), block))
                key, block = await self.blocks.next_name()
        raise AssertionError("unreachable")

    async def _timed_put(self, key: str, chunks: list) -> None:
        started = time.monotonic()
        await metrics.put_object(self.objects, key, chunks, "wal")
        self.put_timing.record(time.monotonic() - started)

    async def _put_raced(self, key: str, block: NameBlock, chunks: list) -> tuple[str, NameBlock]:
        """Put the object under ``key``, or, if that put is slow, under whichever of ``key``
        and a second name lands first; the name (and block) returned is the one to commit.
        On failure, ``key`` is the caller's to seal, as any failed put's."""
        delay = self.put_timing.hedge_delay()
        if delay is None:
            await self._timed_put(key, chunks)
            return key, block
        first = asyncio.ensure_future(self._timed_put(key, chunks))
        try:
            await asyncio.wait((first,), timeout=delay)
            if not first.done():
                try:
                    race = await self.blocks.next_name()
                except Exception as exc:  # no second name now: the first put alone will do
                    log.debug("no name to race a slow put of %s with: %s", key, exc)
                else:
                    return await self._race(first, (key, block), race, chunks)
            await first
            return key, block
        except BaseException:
            first.cancel()
            raise

    async def _race(self, first: asyncio.Future, name: tuple[str, NameBlock], race: tuple[str, NameBlock],
                    chunks: list) -> tuple[str, NameBlock]:
        self.put_timing.raced()
        second = asyncio.ensure_future(self._timed_put(race[0], chunks))
        try:
            pending = {first, second}
            while pending:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for put, won, other, lost in ((second, race, first, name), (first, name, second, race)):
                    if put.done() and not put.cancelled() and put.exception() is None:
                        metrics.RACED_PUTS.labels("second" if put is second else "first").inc()
                        self._abandon_when_done(lost, other)
                        return won
        except BaseException:
            second.cancel()
            self._abandon_when_done(race, second)
            raise
        self._abandon_when_done(race, second)
        first.result()  # both failed: raises the first put's error
        raise AssertionError("unreachable")

    def _abandon_when_done(self, name: tuple[str, NameBlock], put: asyncio.Future) -> None:
        """Seal a name whose object is not committed, once its put is over (so the collector
        deletes what may have landed, never before it lands)."""
        key, block = name

        def over(task: asyncio.Future) -> None:
            if not task.cancelled() and isinstance(task.exception(), ObjectExists):
                block.claimed = True  # the collector took the block (see _put_object)
            self._track(self._seal(key, _CommitRound(), block))

        if put.done():
            over(put)
        else:
            self._losing_puts.add(put)  # close waits for it, and so for its seal
            put.add_done_callback(self._losing_puts.discard)
            put.add_done_callback(over)

    async def _write_replicas(self, key: str, block: NameBlock, chunks: list) -> tuple[str, NameBlock]:
        """Put the object on its write set; a set that cannot take it is left for a new block
        (a new ensemble without the replicas that failed), up to three times."""
        for attempt in range(3):
            try:
                slow = await self.replicas.write(key, block, chunks)
            except (WalUnavailable, BlockFenced) as exc:
                if attempt == 2:
                    raise
                log.warning("WAL object %s: %s; writing it to a new ensemble", key, exc)
                if isinstance(exc, BlockFenced):
                    block.claimed = True
                failed = tuple(self.replicas.write_set(key, block))
                self._track(self._seal(key, _CommitRound(), block))
                key, block = await self.blocks.next_name(avoid=failed)
                continue
            if slow and block is self.blocks.current:  # under-replicated: the next objects go to a new ensemble
                self.blocks.close(block)
            return key, block
        raise AssertionError("unreachable")

    def _block_done(self, block: NameBlock) -> None:
        """The block's marker is gone: its replicas may forget it."""
        for replica_id in block.ensemble:
            self._track(self.replicas.drop(replica_id, block.marker))

    async def _seal(self, key: str, round_: _CommitRound, block: NameBlock, chunks: list | None = None) -> None:
        try:
            if not round_.sealed:
                await gc.seal(self.meta, key, round_.committed)
            if round_.not_committed:  # named by the seal of the commit round, or by a seal it may have made
                await gc.release(self.meta, key, round_.not_committed)
        except Exception:  # the collector resolves the block from its marker instead
            log.warning("could not seal object %s", key, exc_info=True)
            if self.uploader is not None:
                self.uploader.settled(block)  # the rest of its block's group goes up without it
            return
        if block.ensemble and round_.committed and chunks:
            self.uploader.add(key, block, self.replicas.write_set(key, block), chunks)  # done once uploaded
        else:
            self.blocks.finished(block)
        if self.uploader is not None:
            self.uploader.settled(block)

    async def _commit_all(self, batch: list[_Pending], key: str, layouts: list[wal_format.SliceLayout],
                          round_: _CommitRound) -> None:
        """Commit every stream's slice of one object, and seal the object, with one ``put_many``."""
        ops: list = []
        spans: list[tuple[_Pending, int, int, IndexEntry] | None] = []
        for pending, layout in zip(batch, layouts):
            try:
                slice_ops, entry = pending.session.prepare(key, layout.position, layout.length,
                                                           layout.entry_count, layout.record_count)
            except Exception as exc:
                _fail(pending.futures, exc)
                spans.append(None)
                continue
            spans.append((pending, len(ops), len(ops) + len(slice_ops), entry))
            ops += slice_ops
        if not ops:
            return
        named = [(pending.session.stream_id, entry.base) for pending, _, _, entry in filter(None, spans)]
        ops.append(gc.seal_op(key, named))
        results = await self.meta.put_many(ops)
        round_.sealed = not isinstance(results[-1], Exception)
        for span, layout in zip(spans, layouts):
            if span is None:
                continue
            pending, lo, hi, prepared = span
            try:
                entry = await pending.session.finish(results[lo:hi])
            except Exception as exc:
                if isinstance(exc, StreamFenced):
                    metrics.FENCED_SLICES.inc()
                if isinstance(results[hi - 1], UnexpectedVersion):  # its tail did not move: surely not committed
                    round_.not_committed.append((pending.session.stream_id, prepared.base))
                _fail(pending.futures, exc)
                continue
            round_.committed.append((pending.session.stream_id, entry.base))
            self._completed(pending, entry, layout)

    def _completed(self, pending: _Pending, entry: IndexEntry, layout: wal_format.SliceLayout) -> None:
        self._sessions[pending.session.stream_id] = pending.session
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

    async def _group_idle_streams(self) -> None:
        pause = self.options.idle_group_interval
        if self.blocks.group_seconds:  # a quiet writer's group goes up about when it is due
            pause = min(pause, self.blocks.group_seconds / 2)
        while not self._closed:
            await asyncio.sleep(pause)
            try:
                await self.group_idle_streams()
            except Exception:
                log.exception("grouping the pending slices of quiet streams failed")
            if self.uploader is not None:
                self.blocks.retire_expired()
                try:
                    await self.blocks.touch_old_markers(self.options.marker_touch_seconds)
                except Exception as exc:  # tried again next round, well within the collector's timeout
                    log.warning("touching the markers of blocks waiting for upload failed: %s", exc)

    async def group_idle_streams(self) -> None:
        """Write the old pending slices of quiet streams as idx groups (see the session)."""
        now_ms = int(time.time() * 1000)
        for stream_id, session in list(self._sessions.items()):
            if not session.usable or not session.has_pending:
                del self._sessions[stream_id]
        due = [s for s in self._sessions.values() if s.idle_group_due(now_ms)]
        if not due:
            return
        # In the commit order of flushes: a session commits one thing at a time.
        previous = self._last_commit
        done = self._last_commit = asyncio.get_running_loop().create_future()
        try:
            if previous is not None:
                await previous
            results = await asyncio.gather(*(s.write_idle_group() for s in due if s.idle_group_due(now_ms)),
                                           return_exceptions=True)
            for result in results:
                if isinstance(result, Exception) and not isinstance(result, StreamFenced):
                    log.warning("grouping a quiet stream's pending slices failed: %s", result)
        finally:
            done.set_result(None)

    async def flush(self) -> None:
        """Flush what is buffered now; return once it and every flush already in flight are done.

        Flushes that start later (other streams keep appending) do not hold the caller
        up, and cancelling the caller cancels no flush: other appenders share them.
        """
        self._flush_now()
        if self._buffer:  # every flush slot is busy: the buffer leaves with the next flush to start
            started = asyncio.get_running_loop().create_future()
            self._start_waiters.append(started)
            await started
        pending = list(self._flushes)
        if pending:
            await asyncio.shield(asyncio.gather(*pending, return_exceptions=True))

    async def _drain(self) -> None:
        """Wait until no flush is in flight (at close, when nothing new is appended)."""
        self._flush_now()
        while self._flushes or self._losing_puts:
            await asyncio.gather(*self._flushes, *self._losing_puts, return_exceptions=True)

    async def close(self) -> None:
        self._closed = True
        await self.health.close()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
            await asyncio.gather(self._housekeeping, return_exceptions=True)
        await self._drain()
        await self.blocks.close_all()
        await self._drain()
        if self.uploader is not None:
            try:
                await asyncio.wait_for(self.uploader.drain(), _CLOSE_UPLOAD_SECONDS)
            except asyncio.TimeoutError:
                log.warning("%d WAL object(s) not uploaded at close; the collector uploads them from the "
                            "replicas", self.uploader.pending)
            await self.uploader.close()
            await self.replicas.close()


def _fail(futures: list[asyncio.Future], exc: Exception) -> None:
    for future in futures:
        if not future.done():
            future.set_exception(exc)
