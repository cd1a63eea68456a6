"""Per-stream transaction index: which transactions are open and which were aborted, per stream.

Keys (all under the partition key ``stream_partition(stream_id)``, so one shard holds
a stream's whole index and a range scan reads it)::

    /nereus/txn/stream/{stream_id:020d}/open/{pid:020d}     {"first": lower bound, "epoch": e, "seq": s}
    /nereus/txn/stream/{stream_id:020d}/aborted/{last:020d} {"pid": p, "first": f, "last": l}

``begin`` runs before the first transactional append of a producer to a stream and
``complete`` after its marker committed, so the last stable offset (the lowest open
``first``, or the high watermark) never passes an undecided record, and an aborted
range is listed before its open record goes. ``seq`` is the transaction's sequence number in
its coordinator record (0: untagged): a marker of another transaction of the same producer
leaves the record alone.

``StreamTransactions`` caches each stream's index and keeps one subscription to the
metadata plane's change notifications to drop a stream's entry when another process
changes it; a stream that never had a transaction costs one cached "nothing" answer.
At most ``MAX_CACHED`` streams are cached (the least recently used go first), so a broker
that reads millions of streams over its life holds no entry for each of them. Nothing is
cached while the subscription is down (every view reads the metadata).
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ..meta.api import Notification

log = logging.getLogger(__name__)

STREAM_ROOT = "/nereus/txn/stream"
WIDTH = 20
OPEN_INDEX = "nereus-txn-open"  # secondary index of every open record, by pid: finds stale ones


def same_transaction(stored: int, sequence: int) -> bool:
    """Whether an open record of sequence ``stored`` belongs to transaction ``sequence`` (0 on
    either side: untagged, from before sequence numbers, or a caller that ends whatever is open)."""
    return not stored or not sequence or stored == sequence


def stream_partition(stream_id: int) -> str:
    return f"{STREAM_ROOT}/{stream_id:0{WIDTH}d}"


def open_key(stream_id: int, pid: int) -> str:
    return f"{stream_partition(stream_id)}/open/{pid:0{WIDTH}d}"


def aborted_key(stream_id: int, last: int) -> str:
    return f"{stream_partition(stream_id)}/aborted/{last:0{WIDTH}d}"


def _stream_of(key: str) -> int | None:
    if not key.startswith(STREAM_ROOT + "/"):
        return None
    part = key[len(STREAM_ROOT) + 1:].split("/", 1)[0]
    return int(part) if part.isdigit() else None


@dataclass(frozen=True, slots=True)
class AbortedRange:
    pid: int
    first: int
    last: int  # the abort marker's offset


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    """One open record, as the stale-record sweep sees it."""

    stream_id: int
    pid: int
    epoch: int
    first: int
    modified_ms: int  # when it was written (the metadata plane's clock)
    sequence: int = 0  # the transaction's sequence number (0: untagged)


@dataclass(frozen=True, slots=True)
class StreamIndex:
    """A stream's index as read from the metadata plane."""

    open: dict[int, tuple[int, int]] = field(default_factory=dict)  # pid -> (first, epoch)
    aborted: tuple[AbortedRange, ...] = ()  # sorted by last


EMPTY_INDEX = StreamIndex()


class TxnView:
    """What a reader of one stream may see, at one high watermark."""

    def __init__(self, index: StreamIndex, high_watermark: int) -> None:
        self._index = index
        self._lasts = [r.last for r in index.aborted]
        firsts = [first for first, _ in index.open.values()]
        self.lso: int = min([high_watermark, *firsts])
        self.high_watermark = high_watermark

    @property
    def open(self) -> dict[int, int]:
        """pid -> first offset (lower bound) of every open transaction of the stream."""
        return {pid: first for pid, (first, _) in self._index.open.items()}

    def aborted(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """(pid, first, last) of the aborted transactions overlapping ``[start, end)``, by first offset."""
        out = [r for r in self._index.aborted[bisect.bisect_left(self._lasts, start):] if r.first < end]
        return [(r.pid, r.first, r.last) for r in sorted(out, key=lambda r: r.first)]

    def is_aborted(self, pid: int, offset: int) -> bool:
        """True if ``offset`` was written by producer ``pid`` in a transaction that aborted."""
        for r in self._index.aborted[bisect.bisect_left(self._lasts, offset):]:
            if r.pid == pid and r.first <= offset:
                return True
        return False


async def read_index(meta: MetadataStore, stream_id: int) -> StreamIndex:
    """A stream's index read from the metadata plane, uncached (for jobs outside a broker).

    Open records are read before aborted ones: a transaction that completes in between
    is then either still open (the LSO stays below its records) or listed as aborted
    (``complete`` lists it before it stops being open).
    """
    part = stream_partition(stream_id)
    opened: dict[int, tuple[int, int]] = {}
    async for rec in meta.range_scan(f"{part}/open/", f"{part}/open/\U0010ffff", partition_key=part):
        value = json.loads(rec.value)
        opened[int(rec.key.rsplit("/", 1)[1])] = (value["first"], value.get("epoch", -1))
    aborted = []
    async for rec in meta.range_scan(f"{part}/aborted/", f"{part}/aborted/\U0010ffff", partition_key=part):
        value = json.loads(rec.value)
        aborted.append(AbortedRange(value["pid"], value["first"], value["last"]))
    if not opened and not aborted:
        return EMPTY_INDEX
    aborted.sort(key=lambda r: r.last)
    return StreamIndex(opened, tuple(aborted))


async def read_view(meta: MetadataStore, stream_id: int, high_watermark: int) -> TxnView:
    """``TxnView`` of a stream from an uncached read (read ``high_watermark`` BEFORE calling)."""
    return TxnView(await read_index(meta, stream_id), high_watermark)


def aborted_view(ranges, high_watermark: int = 0) -> TxnView:
    """A ``TxnView`` of given aborted ``(pid, first, last)`` ranges only (what a planned read carries)."""
    return TxnView(StreamIndex({}, tuple(sorted((AbortedRange(*r) for r in ranges), key=lambda r: r.last))),
                   high_watermark)


#: Most streams whose index a broker keeps cached.
MAX_CACHED = 100_000


class StreamTransactions:
    """The transaction index of every stream, cached per broker and invalidated by notifications."""

    def __init__(self, meta: MetadataStore, *, backoff_cap: float = 5.0, max_cached: int = MAX_CACHED) -> None:
        self.meta = meta
        self._cache: OrderedDict[int, StreamIndex] = OrderedDict()  # least recently used first
        self._max_cached = max_cached
        # Streams with reads in flight -> (invalidations since the first began, reads in flight):
        # a read that an invalidation overtook is not cached.
        self._reading: dict[int, list[int]] = {}
        self._resets = 0
        self._live = False
        self._task: asyncio.Task | None = None
        self._closed = False
        self._backoff_cap = backoff_cap
        self._listeners: list[Callable[[int], None]] = []
        self.reads = 0  # metadata reads of a stream index (observability, tests)

    @property
    def live(self) -> bool:
        """True while the notification subscription is in place (views are cached)."""
        return self._live

    # -- writes ----------------------------------------------------------------------------
    async def begin(self, stream_id: int, pid: int, epoch: int, first_hint: int, *, sequence: int = 0) -> None:
        """Record an open transaction of ``pid`` on the stream, before its first append (idempotent);
        ``sequence``: the transaction's number in its coordinator record."""
        value = json.dumps({"first": first_hint, "epoch": epoch, "seq": sequence}).encode()
        try:
            await self.meta.put(open_key(stream_id, pid), value, expected_version_id=EXPECT_ABSENT,
                                partition_key=stream_partition(stream_id),
                                secondary_indexes={OPEN_INDEX: f"{pid:0{WIDTH}d}"})
        except UnexpectedVersion:
            return  # already open: its first offset is the lower one
        self._invalidate(stream_id)

    async def complete(self, stream_id: int, pid: int, commit: bool, marker_offset: int, *,
                       sequence: int = 0) -> None:
        """After the marker at ``marker_offset`` committed: close ``pid``'s transaction ``sequence``
        (0: whichever is open; idempotent)."""
        part = stream_partition(stream_id)
        rec = await self.meta.get(open_key(stream_id, pid), partition_key=part)
        if rec is None:
            return
        value = json.loads(rec.value)
        if not same_transaction(value.get("seq", 0), sequence):
            return
        if not commit:  # listed as aborted before it stops being open: never visible in between
            first = value["first"]
            await self.meta.put(aborted_key(stream_id, marker_offset),
                                json.dumps({"pid": pid, "first": first, "last": marker_offset}).encode(),
                                partition_key=part)
        await self.meta.delete(open_key(stream_id, pid), expected_version_id=rec.version.version_id,
                               partition_key=part)
        self._invalidate(stream_id)

    async def open_sequence(self, stream_id: int, pid: int) -> int | None:
        """The sequence number of ``pid``'s open transaction on the stream (0: untagged), None when
        none is open (read from the metadata plane)."""
        rec = await self.meta.get(open_key(stream_id, pid), partition_key=stream_partition(stream_id))
        return None if rec is None else json.loads(rec.value).get("seq", 0)

    async def open_transactions(self) -> list[OpenTransaction]:
        """Every open record of every stream (few: one per open transaction and partition)."""
        out = []
        async for rec in self.meta.range_scan("", "\U0010ffff", use_index=OPEN_INDEX):
            stream_id = _stream_of(rec.key)
            if stream_id is None:
                continue
            value = json.loads(rec.value)
            out.append(OpenTransaction(stream_id, int(rec.key.rsplit("/", 1)[1]), value.get("epoch", -1),
                                       value["first"], rec.version.modified_timestamp, value.get("seq", 0)))
        return out

    async def forget_aborted_before(self, stream_id: int, start_offset: int) -> None:
        """Drop aborted ranges that end below ``start_offset`` (their records were trimmed)."""
        await self.meta.delete_range(aborted_key(stream_id, 0), aborted_key(stream_id, start_offset),
                                     partition_key=stream_partition(stream_id))
        self._invalidate(stream_id)

    async def trimmed(self, stream_id: int, start_offset: int) -> None:
        """After a trim to ``start_offset``: forget the aborted ranges it emptied, if any (a
        stream without them costs the cached index read only; a storage trim listener)."""
        index = await self.index(stream_id)
        if index.aborted and index.aborted[0].last < start_offset:
            await self.forget_aborted_before(stream_id, start_offset)

    async def forget_stream(self, stream_id: int) -> None:
        """Drop a deleted stream's whole index."""
        part = stream_partition(stream_id)
        for lo, hi in ((f"{part}/open/", f"{part}/open/\U0010ffff"),
                       (f"{part}/aborted/", f"{part}/aborted/\U0010ffff")):
            await self.meta.delete_range(lo, hi, partition_key=part)
        self._invalidate(stream_id)

    # -- reads -----------------------------------------------------------------------------
    async def view(self, stream_id: int, high_watermark: int) -> TxnView:
        """The stream's last stable offset and aborted ranges (cached)."""
        return TxnView(await self.index(stream_id), high_watermark)

    async def read_view(self, stream_id: int, high_watermark: int) -> TxnView:
        """``view`` from an uncached read (read ``high_watermark`` BEFORE calling): what a
        key-compaction build stops at (``topics.key_compaction.StableEnd``)."""
        return await read_view(self.meta, stream_id, high_watermark)

    async def index(self, stream_id: int) -> StreamIndex:
        cached = self._cache.get(stream_id)
        if cached is not None:
            self._cache.move_to_end(stream_id)
            return cached
        self._subscribe()
        reading = self._reading.setdefault(stream_id, [0, 0])
        reading[1] += 1
        generation, resets, live = reading[0], self._resets, self._live
        try:
            index = await self._read(stream_id)
        finally:
            reading[1] -= 1
            if not reading[1]:
                del self._reading[stream_id]
        if live and self._live and resets == self._resets and generation == reading[0]:
            self._cache[stream_id] = index
            if len(self._cache) > self._max_cached:
                self._cache.popitem(last=False)
        return index

    async def _read(self, stream_id: int) -> StreamIndex:
        self.reads += 1
        return await read_index(self.meta, stream_id)

    # -- invalidation ----------------------------------------------------------------------
    def add_listener(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(stream_id)`` whenever a stream's index may have changed (e.g. its LSO moved)."""
        self._listeners.append(callback)

    def _invalidate(self, stream_id: int) -> None:
        reading = self._reading.get(stream_id)
        if reading is not None:
            reading[0] += 1
        self._cache.pop(stream_id, None)
        for callback in list(self._listeners):
            try:
                callback(stream_id)
            except Exception:
                log.exception("a stream transaction listener failed")

    def _reset(self) -> None:
        self._resets += 1
        changed = list(self._cache)
        self._cache.clear()
        for stream_id in changed:
            self._invalidate(stream_id)

    def _subscribe(self) -> None:
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="nereus-txn-index-watch")

    async def _run(self) -> None:
        delay = 0.05
        while not self._closed:
            try:
                async with self.meta.notifications() as stream:
                    self._live = True
                    self._reset()  # anything may have changed before the subscription
                    delay = 0.05
                    async for note in stream:
                        self._dispatch(note)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("transaction index notifications broke (%s: %s); subscribing again", type(exc).__name__,
                            exc)
            finally:
                self._live = False
                self._cache.clear()
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._backoff_cap)

    def _dispatch(self, note: Notification) -> None:
        stream_id = _stream_of(note.key)
        if stream_id is not None:
            self._invalidate(stream_id)
        elif note.key_range_end is not None and note.key < STREAM_ROOT + "/\U0010ffff" \
                and note.key_range_end > STREAM_ROOT:  # a range deletion that may cover stream indexes
            self._reset()

    async def close(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


__all__ = ["same_transaction", "AbortedRange", "aborted_view", "read_index", "read_view", "OPEN_INDEX", "OpenTransaction", "STREAM_ROOT", "StreamIndex", "StreamTransactions", "TxnView", "aborted_key", "open_key",
           "stream_partition"]
