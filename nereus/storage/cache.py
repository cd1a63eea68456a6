"""Read caches. They are only caches: the metadata plane decides what is readable.

``TailCache`` keeps the most recently committed entries of every stream, so that
tailing readers are served from memory. ``BlockCache`` keeps decoded slices fetched
from objects for catch-up readers. Both are bounded by bytes.
"""

from __future__ import annotations

import bisect
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

from . import metrics
from .api import FetchedEntry

_TAIL_HITS, _TAIL_MISSES = metrics.CACHE_HITS.labels("tail"), metrics.CACHE_MISSES.labels("tail")
_BLOCK_HITS, _BLOCK_MISSES = metrics.CACHE_HITS.labels("block"), metrics.CACHE_MISSES.labels("block")


@dataclass(slots=True)
class _StreamTail:
    # Parallel lists, not an object per entry: a full cache of small entries would otherwise
    # be ~100k objects for the cyclic GC to walk at every full collection (a pause per walk).
    bases: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    datas: list[bytes | memoryview] = field(default_factory=list)
    head: int = 0  # entries before this index were evicted

    def compact(self) -> None:
        if self.head > 64 and self.head * 2 > len(self.bases):
            del self.bases[: self.head]
            del self.counts[: self.head]
            del self.datas[: self.head]
            self.head = 0


#: Bytes an entry is charged beyond its data (its places in the lists, the eviction order): many
#: streams of small entries stay within the bound too.
ENTRY_OVERHEAD = 64
#: How long a committed entry stays cached at most (Pulsar evicts its cache by age too): a stream
#: that went quiet keeps nothing, a reader tailing it was served long ago.
TAIL_MAX_AGE = 60.0


class TailCache:
    """Recently committed entries, per stream, evicted oldest-first across streams.

    Eviction goes by the batches ``add`` was given (one per stream and flush), oldest first,
    when the bytes pass ``max_bytes`` or a batch is older than ``max_age`` seconds (``add`` and
    ``evict_aged`` look); a stream whose entries are all evicted is forgotten (a broker may have
    a million quiet streams, each written once).
    """

    def __init__(self, max_bytes: int = 64 << 20, *, max_age: float = TAIL_MAX_AGE,
                 clock: Callable[[], float] = time.monotonic):
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.bytes = 0
        self._clock = clock
        self._streams: dict[int, _StreamTail] = {}
        # (stream id, owner, entries, bytes, added at) in insertion order
        self._order: deque[tuple[int, _StreamTail, int, int, float]] = deque()
        self._dropped = 0  # streams dropped since _order was last rebuilt

    def add(self, stream_id: int, base: int, entries: list[tuple[int, bytes | memoryview]]) -> None:
        tail = self._streams.setdefault(stream_id, _StreamTail())
        if len(tail.bases) > tail.head and tail.bases[-1] + tail.counts[-1] != base:
            self.drop(stream_id)  # not contiguous (e.g. a new session elsewhere): start afresh
            tail = self._streams.setdefault(stream_id, _StreamTail())
        size = 0
        for count, data in entries:
            tail.bases.append(base)
            tail.counts.append(count)
            tail.datas.append(data)
            size += len(data) + ENTRY_OVERHEAD
            base += count
        now = self._clock()
        self._order.append((stream_id, tail, len(entries), size, now))
        self.bytes += size
        while self.bytes > self.max_bytes and self._order:
            self._evict_oldest()
        self.evict_aged(now)

    def evict_aged(self, now: float | None = None) -> None:
        """Evict the batches older than ``max_age`` (called on each ``add`` and now and then)."""
        cutoff = (self._clock() if now is None else now) - self.max_age
        while self._order and self._order[0][4] < cutoff:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        sid, owner, n, size, _added = self._order.popleft()
        if owner.head < len(owner.bases):  # a dropped owner was accounted already
            self.bytes -= size
            owner.head += n
            if owner.head >= len(owner.bases):  # nothing left: forget the stream (and its entries' data)
                if self._streams.get(sid) is owner:
                    del self._streams[sid]
                owner.bases, owner.counts, owner.datas, owner.head = [], [], [], 0
            else:
                owner.compact()

    def read(self, stream_id: int, offset: int, end: int, max_bytes: int) -> list[FetchedEntry]:
        """Contiguous cached entries from the one containing ``offset``; [] on a miss."""
        tail = self._streams.get(stream_id)
        if tail is None:
            _TAIL_MISSES.inc()
            return []
        bases, counts, datas = tail.bases, tail.counts, tail.datas
        i = bisect.bisect_right(bases, offset, lo=tail.head) - 1
        if i < tail.head or bases[i] + counts[i] <= offset:
            _TAIL_MISSES.inc()
            return []
        _TAIL_HITS.inc()
        out: list[FetchedEntry] = []
        total = 0
        while i < len(bases) and bases[i] < end and (not out or total < max_bytes):
            out.append(FetchedEntry(bases[i], counts[i], datas[i]))
            total += len(datas[i])
            i += 1
        return out

    def drop(self, stream_id: int) -> None:
        tail = self._streams.pop(stream_id, None)
        if tail is not None:
            # Its batches stay in _order until popped; account them now and mark it empty.
            self.bytes -= sum(len(d) + ENTRY_OVERHEAD for d in tail.datas[tail.head:])
            tail.bases, tail.counts, tail.datas, tail.head = [], [], [], 0
            self._dropped += 1
            if self._dropped > 1024 and self._dropped * 2 > len(self._order):
                # Mostly dropped streams' batches (a large unload): keep only the live ones, so
                # the records of streams long gone do not wait for eviction to be freed.
                self._order = deque(b for b in self._order if self._streams.get(b[0]) is b[1])
                self._dropped = 0


class BlockCache:
    """Decoded slices keyed by (object, position), least recently used evicted first."""

    def __init__(self, max_bytes: int = 128 << 20):
        self.max_bytes = max_bytes
        self.bytes = 0
        self._blocks: OrderedDict[tuple[str, int], tuple[int, list[tuple[int, memoryview]]]] = OrderedDict()

    def get(self, key: tuple[str, int]) -> list[tuple[int, memoryview]] | None:
        block = self._blocks.get(key)
        if block is None:
            _BLOCK_MISSES.inc()
            return None
        _BLOCK_HITS.inc()
        self._blocks.move_to_end(key)
        return block[1]

    def put(self, key: tuple[str, int], size: int, entries: list[tuple[int, memoryview]]) -> None:
        if key in self._blocks or size > self.max_bytes:
            return
        self._blocks[key] = (size, entries)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (evicted, _) = self._blocks.popitem(last=False)
            self.bytes -= evicted
