"""When the WAL writer starts a flush: at once when idle, else when the flush ahead of it
reaches its commit turn; and what one flush's metadata round holds.

The writers here have a flush timer of an hour: a test that needed it would hang
(and fail on its ``wait_for``), so whatever completes was flushed without it.
Object puts are held and released by the test (``FaultInjectingObjectStore.hold_puts``).
"""

import asyncio

import pytest

from nereus.storage import GarbageCollector, StorageOptions, StreamFenced, StreamStorage, WalOptions, records, wal_format, wal_writer

from .test_session_lifecycle import Held

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


async def test_a_flush_at_its_commit_turn_lets_the_next_one_write_meanwhile(meta, objects):
    held = Held(meta, "put_many")
    storage = StreamStorage(held, objects, node_id="node-a", options=StorageOptions(wal=WalOptions(flush_interval=NO_TIMER)))
    try:
        a, b = await storage.open_stream("a", create=True), await storage.open_stream("b", create=True)
        for s in (a, b):
            await asyncio.wait_for(s.append(b"warm-up", 1), GUARD)
        held.hold = asyncio.Event()
        puts = objects.calls["put_if_absent"]
        first = asyncio.ensure_future(a.append(b"a1", 1))
        await asyncio.wait_for(held.entered.wait(), GUARD)  # written; its commit is held
        second = asyncio.ensure_future(b.append(b"b1", 1))
        await asyncio.wait_for(until(lambda: objects.calls["put_if_absent"] == puts + 2), GUARD)
        await until(lambda: storage.writer._ahead == 1)  # written, waiting for its turn
        third = asyncio.ensure_future(a.append(b"a2", 1))  # the second flush is ahead of the commits: wait
        await until(lambda: storage.writer._buffered_bytes > 0)
        for _ in range(100):
            await asyncio.sleep(0)
        assert objects.calls["put_if_absent"] == puts + 2 and not first.done()
        held.hold.set()
        results = await asyncio.wait_for(asyncio.gather(first, second, third), GUARD)
        assert [r.base_offset for r in results] == [1, 1, 2]
        written = await wal_objects(objects)
        assert written[-3:] == [[(a.stream_id, [b"a1"])], [(b.stream_id, [b"b1"])], [(a.stream_id, [b"a2"])]]
    finally:
        await storage.close()


async def test_one_metadata_round_commits_the_slices_and_seals_their_object(meta, objects):
    counted = Held(meta, "put")  # never held: counts the single writes of the flush below
    puts: list[str] = []
    inner_put = counted.put

    async def put(key, *args, **kwargs):
        puts.append(key)
        return await inner_put(key, *args, **kwargs)

    counted.put = put
    storage = StreamStorage(counted, objects, node_id="node-a", options=StorageOptions(wal=WalOptions(flush_interval=NO_TIMER)))
    try:
        a, b = await storage.open_stream("a", create=True), await storage.open_stream("b", create=True)
        for s in (a, b):
            await asyncio.wait_for(s.append(b"warm-up", 1), GUARD)
        await storage.writer.flush()
        puts.clear()
        results = await asyncio.wait_for(asyncio.gather(a.append(b"a1", 1), b.append(b"b1", 1)), GUARD)
        await storage.writer.flush()
        key = [k for k in objects.inner.keys() if k.startswith("wal/")][-1]
        record = records.decode((await meta.get(records.object_key(key))).value)
        assert record["state"] == "sealed"
        assert sorted(record["live"]) == sorted([[a.stream_id, results[0].base_offset],
                                                 [b.stream_id, results[1].base_offset]])
        assert [k for k in puts if k == records.object_key(key)] == []  # sealed in the commit's put_many
    finally:
        await storage.close()


def two_writers(meta, objects) -> tuple[StreamStorage, StreamStorage]:
    return tuple(StreamStorage(meta, objects, node_id=node, options=StorageOptions(wal=WalOptions(flush_interval=NO_TIMER)))
                 for node in ("old", "new"))


async def fence_one_slice_of_a_flush(storage, newer, objects):
    """Streams a and b of ``storage`` share one object whose commit round finds b taken over by
    ``newer``: a commits, b fails. Returns (a, b, the object's key)."""
    a, b = await storage.open_stream("a", create=True), await storage.open_stream("b", create=True)
    for s in (a, b):
        await asyncio.wait_for(s.append(b"warm-up", 1), GUARD)
    objects.hold_puts()
    kept = asyncio.ensure_future(a.append(b"a1", 1))
    fenced = asyncio.ensure_future(b.append(b"b1", 1))
    await asyncio.wait_for(objects.wait_held(1), GUARD)  # one object holds both slices
    taker = await newer.open_stream("b")
    await taker.acquire()  # b's session in the flush is fenced before its commit
    objects.hold_puts(False)
    assert (await asyncio.wait_for(kept, GUARD)).base_offset == 1
    with pytest.raises(StreamFenced):
        await asyncio.wait_for(fenced, GUARD)
    await storage.writer.flush()
    return a, b, [k for k in objects.inner.keys() if k.startswith("wal/") and "-old-" in k][-1]


async def test_a_slice_fenced_in_its_commit_round_is_not_left_live_in_the_seal(meta, objects):
    storage, newer = two_writers(meta, objects)
    try:
        a, _, key = await fence_one_slice_of_a_flush(storage, newer, objects)

        async def live():
            return records.decode((await meta.get(records.object_key(key))).value).get("live")

        deadline = asyncio.get_running_loop().time() + GUARD
        while await live() != [[a.stream_id, 1]]:  # the release runs off the ack path
            assert asyncio.get_running_loop().time() < deadline, await live()
            await asyncio.sleep(0.01)
    finally:
        objects.hold_puts(False)
        await storage.close()
        await newer.close()


async def until(predicate, turns: int = 1000) -> None:
    """Let the loop run until ``predicate()`` holds (a bounded number of turns, no timers)."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")


async def test_a_fenced_slice_its_writer_died_before_releasing_is_released_by_the_collector(meta, objects, monkeypatch):
    storage, newer = two_writers(meta, objects)

    async def died(*args, **kwargs):
        raise ConnectionError("the writer died before its release")

    monkeypatch.setattr(wal_writer.gc, "release", died)
    try:
        a, b, key = await fence_one_slice_of_a_flush(storage, newer, objects)
        object_record = records.object_key(key)
        assert sorted(records.decode((await meta.get(object_record)).value)["live"]) == sorted(
            [[a.stream_id, 1], [b.stream_id, 1]])  # the seal of the commit round names both

        monkeypatch.undo()
        collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=0)
        await collector.collect()
        assert records.decode((await meta.get(object_record)).value)["live"] == [[a.stream_id, 1]]
        assert [e.data for e in (await a.fetch(1, max_bytes=1 << 20)).entries] == [b"a1"]
    finally:
        objects.hold_puts(False)
        await storage.close()
        await newer.close()
