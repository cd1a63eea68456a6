"""When the WAL writer starts a flush: at once when idle, else when the flushes in flight end.

The writers here have a flush timer of an hour: a test that needed it would hang
(and fail on its ``wait_for``), so whatever completes was flushed without it.
Object puts are held and released by the test (``FaultInjectingObjectStore.hold_puts``).
"""

import asyncio

import pytest

from nereus.storage import StorageOptions, StreamStorage, WalOptions, wal_format

NO_TIMER = 3600.0
GUARD = 30  # seconds a test may wait for what should happen at once, before it fails


@pytest.fixture
async def storage(meta, objects):
    storage = StreamStorage(meta, objects, node_id="node-a",
                            options=StorageOptions(wal=WalOptions(flush_interval=NO_TIMER)))
    yield storage
    objects.hold_puts(False)
    await storage.close()


async def wal_objects(objects) -> list[list[tuple[int, list[bytes]]]]:
    """Each WAL object in write order (names are sequential): its slices as (stream id, entries)."""
    out = []
    for key in (k for k in objects.inner.keys() if k.startswith("wal/")):
        data = await objects.inner.get(key)
        out.append([(s.stream_id, [bytes(e) for _, e in wal_format.decode_slice(data[s.position:s.position + s.length],
                                                                                 s.stream_id)])
                    for s in wal_format.decode_directory(data)])
    return out


async def test_an_append_to_an_idle_wal_is_flushed_without_the_timer(storage, objects):
    stream = await storage.open_stream("s", create=True)
    for i in range(5):  # each waits for the one before: the WAL is idle every time
        assert (await asyncio.wait_for(stream.append(b"e%d" % i, 1), GUARD)).base_offset == i
    assert [[(sid, entries)] for [(sid, entries)] in (await wal_objects(objects))] == \
        [[(stream.stream_id, [b"e%d" % i])] for i in range(5)]


async def test_appends_of_one_loop_turn_share_the_flush_of_an_idle_wal(storage, objects):
    streams = [await storage.open_stream(f"s{i}", create=True) for i in range(10)]
    for s in streams:  # sessions first: the appends below then reach the writer in one loop turn
        await asyncio.wait_for(s.append(b"warm-up", 1), GUARD)
    before = objects.calls["put_if_absent"]
    results = await asyncio.wait_for(asyncio.gather(*(s.append(b"x", 1) for s in streams)), GUARD)
    assert [r.base_offset for r in results] == [1] * 10
    assert objects.calls["put_if_absent"] - before == 1


async def test_appends_made_during_a_flush_leave_together_once_it_ends(storage, objects):
    a, b = await storage.open_stream("a", create=True), await storage.open_stream("b", create=True)
    for s in (a, b):
        await asyncio.wait_for(s.append(b"warm-up", 1), GUARD)
    objects.hold_puts()
    first = asyncio.ensure_future(a.append(b"a1", 1))
    await asyncio.wait_for(objects.wait_held(1), GUARD)  # its flush is in flight
    later = [asyncio.ensure_future(a.append(b"a2", 1)), asyncio.ensure_future(b.append(b"b1", 1)),
             asyncio.ensure_future(a.append(b"a3", 1))]
    await asyncio.wait_for(until(lambda: storage.writer._buffered_bytes > 0 and len(storage.writer._buffer) == 2),
                           GUARD)
    assert len(objects.held) == 1  # buffered behind the flush in flight, no flush of their own yet
    objects.hold_puts(False)
    assert (await asyncio.wait_for(first, GUARD)).base_offset == 1
    assert [r.base_offset for r in await asyncio.wait_for(asyncio.gather(*later), GUARD)] == [2, 1, 3]
    written = (await wal_objects(objects))
    assert written[-2:] == [[(a.stream_id, [b"a1"])], [(a.stream_id, [b"a2", b"a3"]), (b.stream_id, [b"b1"])]]


async def test_commits_follow_append_order_with_several_flushes_in_flight(meta, objects):
    # Every append fills an object (max_object_bytes), so each starts a flush of its own
    # until max_inflight_flushes are busy; the puts then finish in reverse order.
    options = WalOptions(flush_interval=NO_TIMER, max_object_bytes=1024, max_inflight_flushes=3)
    storage = StreamStorage(meta, objects, node_id="node-a", options=StorageOptions(wal=options))
    try:
        a, b = await storage.open_stream("a", create=True), await storage.open_stream("b", create=True)
        for s in (a, b):
            await asyncio.wait_for(s.append(b"warm-up", 1), GUARD)
        objects.hold_puts()
        entries = [(a if i % 2 == 0 else b, b"%d" % i + b"." * 1100) for i in range(12)]
        tasks = []
        for stream, entry in entries:
            tasks.append(asyncio.ensure_future(stream.append(entry, 1)))  # they run in this order
        await asyncio.wait_for(objects.wait_held(3), GUARD)
        assert len(objects.held) == 3 and not any(t.done() for t in tasks)  # the rest waits for a free slot
        for held in reversed(objects.held):  # the last put in flight finishes first
            held.set_result(None)
        objects.hold_puts(False)
        results = await asyncio.wait_for(asyncio.gather(*tasks), GUARD)
        assert [r.base_offset for r in results[0::2]] == list(range(1, 7))
        assert [r.base_offset for r in results[1::2]] == list(range(1, 7))
        for stream, parity in ((a, 0), (b, 1)):
            fetched = (await stream.fetch(1)).entries
            assert [bytes(e.data) for e in fetched] == [entry for _, entry in entries[parity::2]]
        assert len((await wal_objects(objects))) == 2 + 3 + 1  # warm-ups, three in flight, then the rest at once
    finally:
        objects.hold_puts(False)
        await storage.close()


async def test_flush_waits_for_what_is_buffered_behind_a_flush_in_flight(storage, objects):
    stream = await storage.open_stream("s", create=True)
    await asyncio.wait_for(stream.append(b"warm-up", 1), GUARD)
    objects.hold_puts()
    first = asyncio.ensure_future(stream.append(b"one", 1))
    await asyncio.wait_for(objects.wait_held(1), GUARD)
    second = asyncio.ensure_future(stream.append(b"two", 1))
    await until(lambda: storage.writer._buffered_bytes > 0)
    flushed = asyncio.ensure_future(storage.writer.flush())
    await asyncio.wait_for(objects.wait_held(2), GUARD)  # flush() started the buffer's flush at once
    assert not flushed.done()
    objects.hold_puts(False)
    await asyncio.wait_for(flushed, GUARD)
    assert first.done() and second.done() and second.result().base_offset == 2


async def until(predicate, turns: int = 1000) -> None:
    """Let the loop run until ``predicate()`` holds (a bounded number of turns, no timers)."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")
