"""Slow WAL object puts on a remote store: raced by a second put, and more flushes in flight.

Puts are held and released by the test (``FaultInjectingObjectStore.hold_puts``); the
writer's record of recent put times is filled by hand, so the race's delay is known.
"""

import asyncio

import pytest

from nereus.objstore.faults import InjectedFault
from nereus.storage import GarbageCollector, StorageOptions, StreamStorage, WalOptions, records
from nereus.storage.put_timing import PutTiming

GUARD = 30  # seconds a test may wait for what should happen at once, before it fails
RACE_AFTER = 0.02  # the put time every recorded put took


@pytest.fixture
async def remote(objects):
    objects.hedge_slow_puts = True  # as an S3 store says of itself
    yield objects
    objects.hold_puts(False)


def wal_keys(objects) -> list[str]:
    return sorted(k for k in objects.inner.keys() if k.startswith("wal/"))


async def open_writer(meta, objects, put_seconds=RACE_AFTER, **wal) -> StreamStorage:
    """A writer whose recent puts all took ``put_seconds`` (so a put is raced after that long)."""
    storage = StreamStorage(meta, objects, node_id="node-a", options=StorageOptions(wal=WalOptions(**wal)))
    for _ in range(64):
        storage.writer.put_timing.record(put_seconds)
    return storage


async def read_all(meta, objects, name: str) -> list[bytes]:
    reader = StreamStorage(meta, objects, node_id="reader")
    try:
        stream = await reader.open_stream(name)
        return [e.data for e in (await stream.fetch(0, max_bytes=1 << 20)).entries]
    finally:
        await reader.close()


async def race_one_append(storage, meta, remote, winner: int):
    """One append whose put is raced; put ``winner`` (0: the first, 1: the race) lands first,
    then the other. Returns the stream, the committed object's key and the other's, once the
    other is sealed with no live slice."""
    stream = await storage.open_stream("s", create=True)
    remote.hold_puts()
    append = asyncio.ensure_future(stream.append(b"payload", 1))
    await asyncio.wait_for(remote.wait_held(2), GUARD)  # the first put, then its race
    remote.held[winner].set_result(None)
    assert (await asyncio.wait_for(append, GUARD)).base_offset == 0
    [committed] = wal_keys(remote)
    remote.hold_puts(False)  # the other lands too, late
    await asyncio.wait_for(until(lambda: len(wal_keys(remote)) == 2), GUARD)
    [other] = [k for k in wal_keys(remote) if k != committed]
    await asyncio.wait_for(until_sealed(meta, other), GUARD)
    assert records.decode((await meta.get(records.object_key(other))).value)["live"] == []
    assert records.decode((await meta.get(records.object_key(committed))).value)["live"] == [[stream.stream_id, 0]]
    return stream, committed, other


async def test_a_slow_put_is_raced_the_first_to_land_is_committed_and_the_other_collected(meta, remote):
    storage = await open_writer(meta, remote)
    try:
        _, committed, late = await race_one_append(storage, meta, remote, winner=1)
        assert late < committed  # the race took the next name, and won
    finally:
        await storage.close()
    await GarbageCollector(meta, remote, pending_timeout_seconds=0, grace_seconds=0).collect()
    assert wal_keys(remote) == [committed]  # the late one is deleted, the committed one kept
    assert await read_all(meta, remote, "s") == [b"payload"]


async def test_when_the_first_put_lands_first_the_second_is_sealed_empty(meta, remote):
    storage = await open_writer(meta, remote)
    try:
        _, first, second = await race_one_append(storage, meta, remote, winner=0)
        assert first < second
    finally:
        await storage.close()
    assert await read_all(meta, remote, "s") == [b"payload"]


async def test_a_put_within_the_usual_time_is_not_raced(meta, remote):
    storage = await open_writer(meta, remote, put_seconds=5.0)
    try:
        stream = await storage.open_stream("s", create=True)
        for i in range(5):
            assert (await asyncio.wait_for(stream.append(b"e%d" % i, 1), GUARD)).base_offset == i
        assert remote.calls["put_if_absent"] == 5
    finally:
        await storage.close()


def test_a_local_store_is_never_raced(meta, objects):
    assert not objects.hedge_slow_puts  # a local disk's slow write is only made slower by another
    storage = StreamStorage(meta, objects, node_id="node-a")
    assert not storage.writer.put_timing.hedging
    for _ in range(64):
        storage.writer.put_timing.record(RACE_AFTER)
    assert storage.writer.put_timing.hedge_delay() is None


async def test_when_both_puts_fail_the_append_fails_and_both_names_are_sealed(meta, remote):
    storage = await open_writer(meta, remote)
    try:
        stream = await storage.open_stream("s", create=True)
        remote.fail_puts(lambda key: key.startswith("wal/"))
        remote.hold_puts()
        append = asyncio.ensure_future(stream.append(b"payload", 1))
        await asyncio.wait_for(remote.wait_held(2), GUARD)
        remote.hold_puts(False)
        with pytest.raises(InjectedFault):
            await asyncio.wait_for(append, GUARD)
        await asyncio.wait_for(storage.writer.flush(), GUARD)
        object_records = await keys_under(meta, records.object_key("wal/"))
        assert len(object_records) == 2  # the first put's name and the race's
        for key in object_records:
            await asyncio.wait_for(until_record_sealed(meta, key), GUARD)
    finally:
        remote.clear_faults()
        await storage.close()


async def test_the_race_budget_leaves_most_slow_puts_alone(meta, remote):
    storage = await open_writer(meta, remote, put_race_budget=0.25)
    try:
        stream = await storage.open_stream("s", create=True)
        remote.delay(puts=RACE_AFTER * 2.5)  # every put is slow now: the store slowed down as a whole
        for i in range(40):
            assert (await asyncio.wait_for(stream.append(b"e%d" % i, 1), GUARD)).base_offset == i
        raced = remote.calls["put_if_absent"] - 40
        assert 0 < raced <= 10
    finally:
        remote.clear_faults()
        await storage.close()


async def flushes_in_flight_at_most(storage, store, slots: int) -> None:
    """``slots`` flushes (one stream each) are held in flight; the next one's flush, once due,
    finds no free slot. Then everything is let go and commits."""
    streams = [await storage.open_stream(f"s{i}", create=True) for i in range(slots + 1)]
    store.hold_puts()
    appends = []
    for s in streams[:slots]:  # each flush interval starts another flush while the ones before are held
        appends.append(asyncio.ensure_future(s.append(b"x", 1)))
        await asyncio.wait_for(store.wait_held(len(appends)), GUARD)
    appends.append(asyncio.ensure_future(streams[slots].append(b"y", 1)))
    await asyncio.wait_for(until(lambda: storage.writer._flush_wanted), GUARD)  # its flush was due ...
    assert len(store.held) == slots  # ... and found no free slot
    store.hold_puts(False)
    assert [r.base_offset for r in await asyncio.wait_for(asyncio.gather(*appends), GUARD)] == [0] * (slots + 1)


async def test_flushes_overlap_more_on_a_store_whose_puts_take_longer_than_a_flush_interval(meta, remote):
    # Puts of 20 ms, a flush interval of 1 ms: the interval becomes 20 / 6 ms and 7 flushes
    # may be in flight (the put time over the interval, plus one), not 4.
    storage = await open_writer(meta, remote, flush_interval=0.001, max_inflight_flushes=4, put_race_quantile=0)
    try:
        assert storage.writer._flush_interval() == pytest.approx(RACE_AFTER / 6)
        await flushes_in_flight_at_most(storage, remote, 7)
    finally:
        await storage.close()


async def test_a_fast_store_keeps_the_configured_flushes_in_flight(meta, objects):
    storage = await open_writer(meta, objects, put_seconds=0.0005, flush_interval=0.001, max_inflight_flushes=4)
    try:
        await flushes_in_flight_at_most(storage, objects, 4)
    finally:
        await storage.close()


def test_put_timing_races_after_the_quantile_within_its_budget():
    timing = PutTiming(hedging=True, quantile=0.9, budget=0.1, window=100, min_samples=10)
    assert timing.hedge_delay() is None  # too few puts to know what is slow
    for ms in range(1, 101):
        timing.record(ms / 1000)
    assert 0.08 <= timing.hedge_delay() <= 0.091  # the 90th percentile, recomputed every few puts
    raced = 0
    for _ in range(100):
        if timing.hedge_delay() is not None:
            timing.raced()
            raced += 1
    assert raced == 10
    assert not PutTiming(hedging=False).hedge_delay()


def test_put_timing_interval_and_slots_follow_the_median_put_time():
    timing = PutTiming(hedging=False)
    assert timing.interval(0.005, 6) == 0.005 and timing.slots(0.005, 4, 32) == 4  # nothing recorded
    for _ in range(50):
        timing.record(0.066)
    assert timing.interval(0.005, 6) == pytest.approx(0.011)
    assert timing.slots(0.011, 4, 32) == 7
    assert timing.slots(0.005, 4, 32) == 15
    assert timing.slots(0.001, 4, 32) == 32
    for _ in range(300):
        timing.record(0.001)
    assert timing.interval(0.005, 6) == 0.005 and timing.slots(0.005, 4, 32) == 4


async def keys_under(meta, prefix: str) -> list[str]:
    return [r.key async for r in meta.range_scan(prefix, prefix + "\U0010ffff")]


async def until_sealed(meta, object_key: str) -> None:
    await until_record_sealed(meta, records.object_key(object_key))


async def until_record_sealed(meta, record_key: str) -> None:
    while True:
        got = await meta.get(record_key)
        if got is not None and records.decode(got.value).get("state") == "sealed":
            return
        await asyncio.sleep(0.005)


async def until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.005)
