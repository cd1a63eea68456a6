"""ListOffsets by timestamp starts from the stream's time index instead of scanning from the start."""

from __future__ import annotations

import asyncio

import pytest

from nereus.codec.kafka import split_batches
from nereus.codec.kafka.records import Record, build_batch
from nereus.kafka.server import KafkaService
from nereus.kafka.server.data import offsets
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import StreamStorage, time_index
from nereus.topics import TopicRegistry, time_marks

BATCHES, PER_BATCH, INTERVAL = 40, 50, 200
BASE_TS = 1_700_000_000_000


class CountingReads:
    """A stream handle whose reads are reported to ``seen(start, result)`` (the rest passes through)."""

    def __init__(self, handle, seen) -> None:
        self._handle = handle
        self._seen = seen

    def __getattr__(self, name):
        return getattr(self._handle, name)

    async def fetch(self, start, end=None, max_bytes=1 << 20):
        result = await self._handle.fetch(start, end, max_bytes=max_bytes)
        self._seen(start, result)
        return result


@pytest.fixture
async def service(monkeypatch):
    monkeypatch.setattr(time_marks, "INTERVAL", INTERVAL)
    engine = open_engine(None, shards=1)
    meta = engine.client(namespace="default")
    storage = StreamStorage(meta, open_object_store("memory://"), node_id="b0")
    registry = TopicRegistry(storage, meta)
    kafka = KafkaService(storage, meta, registry, port=0)
    yield kafka
    await registry.close()
    await storage.close()
    await meta.close()
    await engine.close()


async def append(part, first: int, count: int, stamp) -> None:
    batch = build_batch([Record(i, stamp(first + i), None, b"v") for i in range(count)])
    [(header, body)] = split_batches(batch)
    await part.append(header, body)


async def test_lookup_reads_one_interval_not_the_stream(service):
    await service.catalog.create("timed", 1)
    part = await service.catalog.partition("timed", 0)
    await part.ensure_writer()

    def stamp(offset):  # out of order inside each batch, rising overall
        return BASE_TS + offset * 10 - (offset % 7)

    for b in range(BATCHES):
        await append(part, b * PER_BATCH, PER_BATCH, stamp)
    total = BATCHES * PER_BATCH
    newest = await time_index.last(service.meta, part.handle.stream_id)
    assert newest is not None and newest[0] >= total - INTERVAL - PER_BATCH

    reads = []
    part.handle = CountingReads(part.handle, lambda start, result: reads.append(
        (start, sum(e.end_offset - e.base_offset for e in result.entries))))
    for target_offset in (0, 1, 777, 1500, total - 3):
        reads.clear()
        expected = min(o for o in range(total) if stamp(o) >= stamp(target_offset))
        assert await offsets.offset_for_timestamp(part, stamp(target_offset)) == (expected, stamp(expected))
        assert reads[0][0] >= target_offset - INTERVAL - PER_BATCH  # started near it, not at 0
    reads.clear()
    assert await offsets.offset_for_timestamp(part, stamp(total) + 100) == (-1, -1)
    assert reads[0][0] >= total - INTERVAL - PER_BATCH


async def marked_then_unloaded(service, topic: str) -> tuple[int, tuple[int, int]]:
    """A one-partition topic with 6 batches written (marks left), then unloaded: (stream id, newest mark)."""
    await service.catalog.create(topic, 1)
    part = await service.catalog.partition(topic, 0)
    await part.ensure_writer()
    for b in range(6):
        await append(part, b * PER_BATCH, PER_BATCH, lambda o: BASE_TS + o)
    stream_id = part.handle.stream_id
    before = await time_index.last(service.meta, stream_id)
    await service.registry.unload(part.topic, "test")
    return stream_id, before


async def test_marks_continue_after_a_new_session(service):
    stream_id, before = await marked_then_unloaded(service, "resumed")
    part = await service.catalog.partition("resumed", 0)
    await part.ensure_writer()
    for b in range(6, 12):
        await append(part, b * PER_BATCH, PER_BATCH, lambda o: BASE_TS + o)
    after = await time_index.last(service.meta, stream_id)
    assert after[0] > before[0] and after[1] > before[1]
    # every record below a mark is at most its max: no record is skipped by a lookup
    assert after[1] < BASE_TS + after[0]


async def test_max_timestamp_reads_the_tail_and_one_interval(service):
    await service.catalog.create("newest", 1)
    part = await service.catalog.partition("newest", 0)
    await part.ensure_writer()
    spike = 777

    def stamp(offset):
        return BASE_TS + offset + (10**9 if offset == spike else 0)

    for b in range(BATCHES):
        await append(part, b * PER_BATCH, PER_BATCH, stamp)
    total = BATCHES * PER_BATCH
    newest = await time_index.last(service.meta, part.handle.stream_id)
    assert newest is not None and newest[0] > spike + INTERVAL + PER_BATCH

    reads = []
    part.handle = CountingReads(part.handle, lambda start, _result: reads.append(start))
    # the record stamped newest, not the last of its batch (Kafka's answer since 3.8)
    assert spike % PER_BATCH != PER_BATCH - 1
    assert await offsets.max_timestamp(part) == (spike, stamp(spike))
    assert min(reads) >= spike - INTERVAL - PER_BATCH  # not from the start of the stream

    # newer than the spike, in the tail: found there
    await append(part, total, PER_BATCH, lambda o: BASE_TS + 2 * 10**9 + o)
    reads.clear()
    assert await offsets.max_timestamp(part) == (total + PER_BATCH - 1, BASE_TS + 2 * 10**9 + total + PER_BATCH - 1)
    assert min(reads) >= spike - INTERVAL - PER_BATCH


async def test_appends_made_while_the_marks_are_restored_are_tracked(service, monkeypatch):
    """The restore runs beside the new writer's first appends; what they commit meanwhile is
    taken once it is done, so the next mark still covers every record below it."""
    stream_id, before = await marked_then_unloaded(service, "beside")

    gate, entered = asyncio.Event(), asyncio.Event()
    real_last = time_index.last

    async def held_last(meta, sid):
        entered.set()
        await gate.wait()
        return await real_last(meta, sid)

    monkeypatch.setattr(time_index, "last", held_last)
    part = await service.catalog.partition("beside", 0)
    await asyncio.wait_for(part.ensure_writer(), 30)  # the session does not wait for the restore
    await asyncio.wait_for(entered.wait(), 30)
    for b in range(6, 8):  # committed while the restore is held
        await append(part, b * PER_BATCH, PER_BATCH, lambda o: BASE_TS + o)
    gate.set()
    for b in range(8, 14):
        await append(part, b * PER_BATCH, PER_BATCH, lambda o: BASE_TS + o)
    deadline = asyncio.get_running_loop().time() + 30
    while (after := await real_last(service.meta, stream_id))[0] <= 8 * PER_BATCH:  # marks are written beside
        assert asyncio.get_running_loop().time() < deadline, f"no mark past the held restore: {after}"
        await asyncio.sleep(0.01)
    assert after[0] > before[0]
    assert after[1] < BASE_TS + after[0]  # no mark claims a record it did not see
