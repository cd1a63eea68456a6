"""The per-stream transaction index: LSO, aborted ranges, caching and invalidation across brokers."""

from __future__ import annotations

import asyncio

from nereus.transactions import StreamTransactions


async def wait_until(check, seconds: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_stream_without_transactions_is_read_once(broker):
    txns = broker.stream_txns
    view = await txns.view(7, 100)
    assert view.lso == 100 and view.aborted(0, 100) == [] and view.open == {}
    await txns.view(7, 100)  # subscribes
    await wait_until(lambda: asyncio.sleep(0, txns.live))
    await txns.view(7, 100)  # the first read after the subscription is live is cached
    reads = txns.reads
    for hwm in (100, 150, 200):
        assert (await txns.view(7, hwm)).lso == hwm
    assert txns.reads == reads


async def test_lso_and_aborted_ranges(broker):
    txns = broker.stream_txns
    await txns.begin(1, pid=10, epoch=0, first_hint=5)
    await txns.begin(1, pid=11, epoch=0, first_hint=8)
    await txns.begin(1, pid=10, epoch=0, first_hint=9)  # again: the first lower bound stays
    view = await txns.view(1, 20)
    assert view.lso == 5 and view.open == {10: 5, 11: 8}
    await txns.complete(1, pid=10, commit=False, marker_offset=12)
    view = await txns.view(1, 20)
    assert view.lso == 8
    assert view.aborted(0, 20) == [(10, 5, 12)] and view.aborted(13, 20) == [] and view.aborted(0, 5) == []
    assert view.is_aborted(10, 5) and view.is_aborted(10, 12) and not view.is_aborted(10, 13)
    assert not view.is_aborted(11, 9)
    await txns.complete(1, pid=11, commit=True, marker_offset=14)
    await txns.complete(1, pid=11, commit=True, marker_offset=15)  # a repeat changes nothing
    view = await txns.view(1, 20)
    assert view.lso == 20 and view.aborted(0, 20) == [(10, 5, 12)]
    await txns.forget_aborted_before(1, 13)
    assert (await txns.view(1, 20)).aborted(0, 20) == []


async def test_another_brokers_change_reaches_the_cache_by_notification(broker):
    mine, other = broker.stream_txns, StreamTransactions(broker.meta)
    try:
        await mine.view(3, 50)  # subscribes
        await wait_until(lambda: asyncio.sleep(0, mine.live))
        assert (await mine.view(3, 50)).lso == 50
        changed = []
        mine.add_listener(changed.append)
        await other.begin(3, pid=20, epoch=1, first_hint=40)

        async def lso_moved():
            return (await mine.view(3, 50)).lso == 40
        await wait_until(lso_moved)
        assert 3 in changed
        await other.complete(3, pid=20, commit=True, marker_offset=50)

        async def lso_back():
            return (await mine.view(3, 51)).lso == 51
        await wait_until(lso_back)
    finally:
        await other.close()


async def test_the_cache_is_bounded_and_keeps_nothing_per_stream_once_reads_end(broker):
    txns = StreamTransactions(broker.meta, max_cached=5)
    try:
        await txns.view(0, 1)
        await wait_until(lambda: asyncio.sleep(0, txns.live))
        for stream_id in range(1, 40):  # reads of many streams that never had a transaction
            assert (await txns.view(stream_id, 10)).lso == 10
        assert len(txns._cache) == 5 and not txns._reading
        assert list(txns._cache) == list(range(35, 40))
        await txns.view(35, 10)  # used again: the last to go
        await txns.view(40, 10)
        assert list(txns._cache) == [37, 38, 39, 35, 40]
        reads = txns.reads
        await txns.view(35, 10)
        assert txns.reads == reads  # from the cache

        # A change that overtakes a read in flight keeps that read out of the cache.
        gate = asyncio.Event()
        read = txns._read

        async def slow_read(stream_id):
            await gate.wait()
            return await read(stream_id)

        txns._read = slow_read
        pending = asyncio.ensure_future(txns.view(50, 10))
        await asyncio.sleep(0)
        assert txns._reading == {50: [0, 1]}
        txns._invalidate(50)
        gate.set()
        await pending
        assert 50 not in txns._cache and not txns._reading
    finally:
        await txns.close()
