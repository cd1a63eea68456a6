"""The append session's lifecycle: lost after a failure, fenced by a takeover, and
safe against a collector that resolves a stalled writer's block."""

import asyncio
import time

import pytest

from nereus.storage import AppendSessionLost, StreamFenced, StreamStorage, compaction, gc, session
from nereus.storage.collector import TOMBSTONE, GarbageCollector

from .conftest import FAST


class Held:
    """Wraps a store so that calls of ``method`` wait while ``hold`` is set (a stalled writer)."""

    def __init__(self, inner, method: str):
        self.inner = inner
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()
        original = getattr(inner, method)

        async def held(*args, **kwargs):
            if self.hold is not None:
                self.entered.set()
                await self.hold.wait()
            return await original(*args, **kwargs)

        setattr(self, method, held)

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def read_all(handle):
    await handle.refresh()
    out, offset = [], handle.start_offset()
    while offset < handle.next_offset():
        entries = (await handle.fetch(offset)).entries
        out += [bytes(e.data) for e in entries]
        offset = entries[-1].end_offset
    return out


async def test_a_failed_flush_fails_every_append_behind_it(meta, objects, storage):
    """No append commits behind a failed one (the cause of stored duplicates and reordering)."""
    stream = await storage.open_stream("order", create=True)
    await stream.append(b"first", 1)
    objects.fail_put(objects.calls["put_if_absent"] + 1)  # the next object put fails
    objects.delay(puts=0.05)  # so later appends land in later flushes, behind it
    tasks = []
    for i in range(5):
        tasks.append(asyncio.ensure_future(stream.append(b"m%d" % i, 1)))
        await asyncio.sleep(0.01)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    objects.clear_faults()
    assert all(isinstance(r, Exception) for r in results), results
    assert any(isinstance(r, AppendSessionLost) for r in results)  # the later flushes
    assert await read_all(stream) == [b"first"]
    with pytest.raises(AppendSessionLost):
        await stream.append(b"again", 1)
    await stream.acquire()
    assert (await stream.append(b"again", 1)).base_offset == 1
    assert await read_all(stream) == [b"first", b"again"]


async def test_a_fenced_handle_still_reads_and_its_next_offset_follows_the_new_owner(meta, objects):
    broker_a = StreamStorage(meta, objects, node_id="a", options=FAST)
    broker_b = StreamStorage(meta, objects, node_id="b", options=FAST)
    a = await broker_a.open_stream("moved", create=True)
    await a.append(b"a0", 1)
    b = await broker_b.open_stream("moved")
    await b.acquire()
    await b.append(b"b1", 1)
    await b.append(b"b2", 1)
    with pytest.raises(StreamFenced):
        await a.append(b"stale", 1)
    assert not a.writable and b.writable
    await a.refresh()
    assert a.next_offset() == 3  # not the fenced session's own view (1)
    assert [bytes(e.data) for e in (await a.fetch(0)).entries] == [b"a0", b"b1", b"b2"]
    assert await a.wait_for(2, timeout=0.1)
    await a.acquire()  # takes it back: b is fenced now
    assert (await a.append(b"a3", 1)).base_offset == 3
    with pytest.raises(StreamFenced):
        await b.append(b"stale", 1)
    for s in (broker_a, broker_b):
        await s.close()


async def test_a_quiet_stream_gets_its_pending_slices_grouped(meta, objects, storage, monkeypatch):
    """Slices of a stream that stopped writing reach the offset index (hence compaction)."""
    stream = await storage.open_stream("quiet", create=True)
    for i in range(3):
        await stream.append(b"q%d" % i, 1)
    tail = await storage.tail(stream.stream_id)
    assert len(tail.pending) == 3
    assert await compaction.plan(meta, stream.stream_id) == []  # nothing below the pending slices
    monkeypatch.setattr(session, "GROUP_MAX_AGE_MS", 0)
    await storage.writer.group_idle_streams()
    tail = await storage.tail(stream.stream_id)
    assert not tail.pending and tail.next == 3
    plans = await compaction.plan(meta, stream.stream_id)
    assert [(p.first, p.last) for p in plans] == [(0, 2)]
    assert (await stream.append(b"q3", 1)).base_offset == 3  # the session goes on
    assert await read_all(stream) == [b"q0", b"q1", b"q2", b"q3"]


async def test_the_writer_groups_quiet_streams_by_itself(meta, objects, monkeypatch):
    monkeypatch.setattr(session, "GROUP_MAX_AGE_MS", 50)
    options = type(FAST)(wal=type(FAST.wal)(flush_interval=0.002, idle_group_interval=0.05))
    storage = StreamStorage(meta, objects, node_id="n", options=options)
    stream = await storage.open_stream("alone", create=True)
    await stream.append(b"only", 1)
    deadline = time.monotonic() + 30
    while (await storage.tail(stream.stream_id)).pending:
        assert time.monotonic() < deadline, "the pending slice was never grouped"
        await asyncio.sleep(0.02)
    await storage.close()


async def test_a_stalled_commit_cannot_land_after_the_collector_resolved_its_block(meta, objects):
    """Slow metadata: GC takes the block for a dead writer's; the late commit must fail."""
    held = Held(meta, "put_many")
    storage = StreamStorage(held, objects, node_id="slow", options=FAST)
    stream = await storage.open_stream("stall", create=True)
    await stream.append(b"a", 1)
    await storage.writer.flush()
    held.hold = asyncio.Event()
    late = asyncio.ensure_future(stream.append(b"b", 1))
    await asyncio.wait_for(held.entered.wait(), 30)  # the object is written; the commit waits
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=0)
    stats = await collector.collect()
    assert stats.resolved >= 1
    held.hold.set()
    with pytest.raises(AppendSessionLost):
        await late
    reader = await StreamStorage(meta, objects, node_id="r", options=FAST).open_stream("stall")
    assert await read_all(reader) == [b"a"]  # readable: nothing points at a deleted object
    await stream.acquire()
    assert (await stream.append(b"c", 1)).base_offset == 1
    assert await read_all(reader) == [b"a", b"c"]
    held.hold = None
    await storage.close()
    await collector.collect()
    assert await read_all(reader) == [b"a", b"c"]


async def test_a_stalled_object_put_cannot_land_after_the_collector_resolved_its_block(meta, objects):
    held = Held(objects, "put_if_absent")
    storage = StreamStorage(meta, held, node_id="slow", options=FAST)
    stream = await storage.open_stream("stall-put", create=True)
    await stream.append(b"a", 1)
    held.hold = asyncio.Event()
    late = asyncio.ensure_future(stream.append(b"b", 1))
    await asyncio.wait_for(held.entered.wait(), 30)
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=0)
    assert (await collector.collect()).resolved >= 1  # claims the unwritten names
    held.hold.set()
    # The name it was writing was claimed: the writer puts the object under a new one.
    assert (await late).base_offset == 1
    reader = await StreamStorage(meta, objects, node_id="r", options=FAST).open_stream("stall-put")
    assert await read_all(reader) == [b"a", b"b"]
    held.hold = None
    await storage.close()
    await collector.collect()
    await collector.collect()
    assert await read_all(reader) == [b"a", b"b"]
    assert not [k for k in objects.inner.keys() if await objects.get(k) == TOMBSTONE]


async def test_a_writer_whose_clock_lags_does_not_look_dead(meta, objects, storage, monkeypatch):
    """Marker ages are read on the metadata plane's clock, not the writer's."""
    monkeypatch.setattr(gc, "_now_ms", lambda: int(time.time() * 1000) - 3_600_000)
    stream = await storage.open_stream("skew", create=True)
    await stream.append(b"x", 1)
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=60)
    assert (await collector.collect()).resolved == 0
    assert (await stream.append(b"y", 1)).base_offset == 1


async def test_an_idle_spare_reservation_is_not_used_for_a_write(meta, objects, monkeypatch):
    """A block reserved long ago may be resolved by GC any moment: never write into it."""
    options = type(FAST)(wal=type(FAST.wal)(flush_interval=0.002, reservation_ttl=0.2))
    storage = StreamStorage(meta, objects, node_id="idle", options=options)
    stream = await storage.open_stream("idle", create=True)
    await stream.append(b"0", 1)
    await asyncio.sleep(0.15)  # past half the ttl: the next name reserves a spare block
    await stream.append(b"1", 1)
    spare = storage.writer.blocks.spare
    assert spare is not None
    await spare
    await asyncio.sleep(0.3)  # idle: both the current block and the spare expire
    await stream.append(b"2", 1)
    assert storage.writer.blocks.current is not await spare
    await storage.close()



async def _keep_appending(handle, stop: asyncio.Event) -> int:
    """Append every 3 ms without waiting for acks, as a busy producer does."""
    appends = []
    while not stop.is_set():
        appends.append(asyncio.ensure_future(handle.append(b"busy", 1)))
        await asyncio.sleep(0.003)
    await asyncio.gather(*appends)
    return len(appends)


async def test_closing_a_stream_does_not_wait_for_other_streams_that_keep_appending(objects, storage):
    """A handoff closes one stream while the broker's other streams keep the writer busy forever."""
    objects.put_delay = 0.02  # every flush takes a while, so one is always in flight
    busy, moving = await storage.open_stream("busy", create=True), await storage.open_stream("moving", create=True)
    await moving.append(b"last", 1)
    stop = asyncio.Event()
    appender = asyncio.ensure_future(_keep_appending(busy, stop))
    try:
        await asyncio.sleep(0.1)
        pending = asyncio.ensure_future(moving.append(b"in flight", 1))
        await asyncio.sleep(0)
        await asyncio.wait_for(moving.close(), 5)  # it used to wait until the busy stream paused
        assert (await pending).base_offset == 1  # what was appended before the close is committed
    finally:
        stop.set()
        written = await appender
    assert written > 0


async def test_a_cancelled_flush_caller_cancels_no_flush_other_streams_share(objects, storage):
    objects.put_delay = 0.05
    a, b = await storage.open_stream("a", create=True), await storage.open_stream("b", create=True)
    await a.append(b"first", 1)
    appends = [asyncio.ensure_future(a.append(b"x", 1)) for _ in range(5)]
    while not storage.writer._flushes:  # their flush is on its way to the store
        await asyncio.sleep(0.001)
    flushing = asyncio.ensure_future(storage.writer.flush())
    await asyncio.sleep(0.01)
    flushing.cancel()  # e.g. a handoff given up at shutdown
    assert [(await t).base_offset for t in appends] == [1, 2, 3, 4, 5]
    await b.append(b"y", 1)
