"""TailCache: contiguous reads of recent entries, eviction oldest batch first, bounded by bytes."""

import gc
import weakref

from nereus.storage.cache import ENTRY_OVERHEAD, TailCache

E = 10 + ENTRY_OVERHEAD  # what an entry of ``entries`` is charged


def entries(first: int, n: int, size: int = 10, count: int = 2) -> list[tuple[int, bytes]]:
    return [(count, bytes([first + i]) * size) for i in range(n)]


def test_reads_are_contiguous_from_the_entry_holding_the_offset():
    cache = TailCache()
    cache.add(1, 100, entries(0, 3))  # offsets 100-101, 102-103, 104-105
    cache.add(1, 106, entries(3, 2))
    got = cache.read(1, 103, 200, 1 << 20)
    assert [(e.base_offset, e.record_count, e.data[:1]) for e in got] == \
        [(102, 2, b"\x01"), (104, 2, b"\x02"), (106, 2, b"\x03"), (108, 2, b"\x04")]
    assert [e.base_offset for e in cache.read(1, 100, 104, 1 << 20)] == [100, 102]
    assert [e.base_offset for e in cache.read(1, 100, 200, 15)] == [100, 102]  # past max_bytes after one more
    assert cache.read(1, 99, 200, 1 << 20) == [] and cache.read(1, 110, 200, 1 << 20) == []
    assert cache.read(2, 100, 200, 1 << 20) == []


def test_the_oldest_batches_of_any_stream_go_first():
    cache = TailCache(max_bytes=5 * E)
    cache.add(1, 0, entries(0, 2))  # 2 entries
    cache.add(2, 0, entries(0, 2))  # 4
    cache.add(1, 4, entries(2, 2))  # 6: stream 1's first batch goes
    assert cache.bytes == 4 * E
    assert cache.read(1, 0, 10, 1 << 20) == []
    assert [e.base_offset for e in cache.read(1, 4, 10, 1 << 20)] == [4, 6]
    assert [e.base_offset for e in cache.read(2, 0, 10, 1 << 20)] == [0, 2]


def test_a_gap_or_a_drop_starts_the_stream_afresh_and_frees_its_bytes():
    cache = TailCache()
    cache.add(1, 0, entries(0, 2))
    cache.add(1, 10, entries(2, 1))  # not contiguous with 0..3
    assert cache.read(1, 0, 20, 1 << 20) == [] and cache.bytes == E
    cache.drop(1)
    assert cache.bytes == 0 and cache.read(1, 10, 20, 1 << 20) == []
    cache.add(1, 20, entries(0, 1))
    assert [e.base_offset for e in cache.read(1, 20, 30, 1 << 20)] == [20]


def test_eviction_over_many_batches_keeps_the_count_of_bytes_exact():
    cache = TailCache(max_bytes=3000)
    bases: dict[int, list[int]] = {sid: [0] for sid in range(7)}
    for i in range(500):
        sid, n = i % 7, 1 + i % 3
        cache.add(sid, bases[sid][-1], entries(0, n))
        bases[sid].append(bases[sid][-1] + 2 * n)
    cached = 0
    for sid, starts in bases.items():  # what is left of a stream is its newest batches, contiguous
        kept = next((got for b in starts if (got := cache.read(sid, b, starts[-1], 1 << 30))), [])
        assert not kept or kept[-1].end_offset == starts[-1]
        cached += sum(len(e.data) + ENTRY_OVERHEAD for e in kept)
    assert cache.bytes == cached and 3000 - 3 * E < cached <= 3000  # within one batch of the bound


def test_cached_entries_of_bytes_add_no_objects_for_the_cyclic_collector():
    cache = TailCache()
    cache.add(1, 0, entries(0, 1))
    gc.collect()
    before = len(gc.get_objects())
    base = 2
    for i in range(2000):  # batches of 5 small entries, the shape unbatched produce leaves
        cache.add(1, base, [(1, b"%d" % (i * 5 + j)) for j in range(5)])
        base += 5
    gc.collect()
    assert len(gc.get_objects()) - before < 2000 + 100  # one per batch (its eviction record), not per entry


def test_streams_evicted_whole_are_forgotten_with_their_data():
    cache = TailCache(max_bytes=10 * E)
    first = memoryview(b"a" * 10)
    alive = weakref.ref(first)
    cache.add(0, 0, [(1, first)])
    del first
    for sid in range(1, 1000):  # many quiet streams written once each
        cache.add(sid, 0, [(1, b"b" * 10)])
    gc.collect()
    assert alive() is None  # not held by an evicted stream's lists
    assert len(cache._streams) == 10 and cache.bytes == 10 * E
    assert cache.read(0, 0, 1, 1 << 20) == [] and [e.base_offset for e in cache.read(999, 0, 1, 1 << 20)] == [0]


def test_streams_whose_entries_are_all_evicted_are_forgotten():
    cache = TailCache(max_bytes=10 * E)
    for stream in range(1000):  # one entry each, many more streams than fit
        cache.add(stream, 0, [(1, b"x" * 10)])
    assert len(cache._streams) == 10 and cache.bytes == 10 * E
    assert sorted(cache._streams) == list(range(990, 1000))
    assert cache.read(989, 0, 1, 1 << 20) == []
    assert [e.base_offset for e in cache.read(999, 0, 1, 1 << 20)] == [0]
    cache.add(999, 1, [(1, b"y" * (9 * E - ENTRY_OVERHEAD + 1))])  # evicts every other stream, and 999's first entry
    assert list(cache._streams) == [999]
    assert [bytes(e.data) for e in cache.read(999, 1, 2, 1 << 20)] == [b"y" * (9 * E - ENTRY_OVERHEAD + 1)]
    assert cache.read(999, 0, 1, 1 << 20) == []


def test_a_large_unload_frees_the_dropped_streams_records_before_eviction():
    cache = TailCache()
    for sid in range(5000):
        cache.add(sid, 0, [(1, b"x" * 10)])
    for sid in range(4000):  # their topics unloaded: far below the bound, nothing is evicted
        cache.drop(sid)
    assert len(cache._order) < 2500 and cache.bytes == 1000 * E
    assert [e.base_offset for e in cache.read(4999, 0, 1, 1 << 20)] == [0]
    cache.add(4999, 1, [(1, b"y" * 10)])
    assert [e.base_offset for e in cache.read(4999, 0, 2, 1 << 20)] == [0, 1]


def test_batches_older_than_the_max_age_go_and_a_quiet_stream_is_forgotten():
    now = [1000.0]
    cache = TailCache(max_age=60.0, clock=lambda: now[0])
    cache.add(1, 0, entries(0, 2))
    now[0] += 30
    cache.add(2, 0, entries(0, 1))
    now[0] += 31  # stream 1's batch is 61 s old, stream 2's 31 s
    cache.evict_aged()
    assert cache.read(1, 0, 10, 1 << 20) == [] and len(cache.read(2, 0, 10, 1 << 20)) == 1
    assert 1 not in cache._streams and cache.bytes == E
    now[0] += 30
    cache.add(3, 0, entries(0, 1))  # an add looks too
    assert cache.read(2, 0, 10, 1 << 20) == [] and cache.bytes == E and set(cache._streams) == {3}
