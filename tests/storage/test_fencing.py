"""Two writers on one stream: the newer append session fences the older one."""

import asyncio

import pytest

from nereus.storage import StreamFenced, StreamStorage

from .conftest import FAST


async def test_takeover_fences_the_old_writer_and_its_slice_never_becomes_visible(meta, objects):
    broker_a = StreamStorage(meta, objects, node_id="a", options=FAST)
    broker_b = StreamStorage(meta, objects, node_id="b", options=FAST)
    a = await broker_a.open_stream("topic", create=True)
    assert (await a.append(b"a0", 1)).base_offset == 0
    b = await broker_b.open_stream("topic")
    await b.acquire()
    assert (await b.append(b"b1", 1)).base_offset == 1
    with pytest.raises(StreamFenced):
        await a.append(b"a-stale", 1)
    with pytest.raises(StreamFenced):  # fenced for good
        await a.append(b"a-stale-2", 1)
    assert (await b.append(b"b2", 1)).base_offset == 2
    assert await stored(meta, objects) == [b"a0", b"b1", b"b2"]
    for s in (broker_a, broker_b):
        await s.close()


async def stored(meta, objects) -> list[bytes]:
    """What a fresh reader finds in the stream "topic"."""
    reader = StreamStorage(meta, objects, node_id="r", options=FAST)
    try:
        handle = await reader.open_stream("topic")
        await handle.refresh()
        return [bytes(e.data) for e in (await handle.fetch(0)).entries]
    finally:
        await reader.close()


async def test_racing_writers_never_both_commit_the_same_offsets(meta, objects):
    brokers = [StreamStorage(meta, objects, node_id=f"n{i}", options=FAST) for i in range(3)]
    handles = [await b.open_stream("race", create=True) for b in brokers]
    acked: list[tuple[int, bytes]] = []

    async def writer(i, handle):
        for j in range(30):
            payload = b"%d-%d" % (i, j)
            try:
                acked.append(((await handle.append(payload, 1)).base_offset, payload))
            except StreamFenced:
                try:
                    await handle.acquire()  # take the stream back, fencing the others
                except StreamFenced:
                    pass  # a newer session won the race; try again on the next append
            await asyncio.sleep(0)

    await asyncio.gather(*(writer(i, h) for i, h in enumerate(handles)))
    reader = StreamStorage(meta, objects, node_id="r", options=FAST)
    handle = await reader.open_stream("race")
    await handle.refresh()
    stored = []
    offset = 0
    while offset < handle.next_offset():
        entries = (await handle.fetch(offset)).entries
        stored += [(e.base_offset, bytes(e.data)) for e in entries]
        offset = entries[-1].end_offset
    assert [o for o, _ in stored] == list(range(len(stored)))  # dense
    assert sorted(acked) == stored  # exactly the acknowledged appends, nothing else
    for s in brokers + [reader]:
        await s.close()


async def test_a_creator_that_another_writer_beat_to_its_new_stream_reads_and_fences_it(meta, objects):
    # The creator takes its first session without reading (the stream is new); a writer that
    # found the stream by name first makes those writes fail, and the creator then reads.
    creator = StreamStorage(meta, objects, node_id="a", options=FAST)
    other = StreamStorage(meta, objects, node_id="b", options=FAST)
    mine = await creator.open_stream("topic", create=True)
    assert mine.created
    theirs = await other.open_stream("topic")
    assert not theirs.created
    assert (await theirs.append(b"b0", 1)).base_offset == 0
    assert (await theirs.append(b"b1", 1)).base_offset == 1
    assert (await mine.append(b"a2", 1)).base_offset == 2  # after what the other committed
    assert mine.fencing_token == 2
    with pytest.raises(StreamFenced):
        await theirs.append(b"b-stale", 1)
    assert await stored(meta, objects) == [b"b0", b"b1", b"a2"]
    for s in (creator, other):
        await s.close()
