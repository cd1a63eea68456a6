"""Key-compacted views at the storage layer (no protocol): a toy entry format of
``key=value;key=value`` records (``key=`` a tombstone, ``=value`` no key)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from nereus.storage import gc, key_view, key_view_rows, records
from nereus.storage.api import FetchedEntry
from nereus.storage.compaction_lease import lease
from nereus.storage.errors import CompactionConflict
from nereus.storage.collector import GarbageCollector


@pytest.fixture
def storage(storage_on_each_wal):
    """Each test once with the object WAL and once with WAL replicas on disk (tests/storage/conftest.py)."""
    return storage_on_each_wal


def extract(base: int, data: memoryview):
    offsets, keys, tombstones, stamps = [], [], [], []
    for i, rec in enumerate(bytes(data).split(b";")):
        key, _, value = rec.partition(b"=")
        offsets.append(base + i)
        keys.append(key or None)
        tombstones.append(not value)
        stamps.append(int(key[1:]) if key.startswith(b"t") else 0)
    return offsets, keys, tombstones, stamps


def extract_many(entries):
    """``extract`` of many entries as one table (what the topic layer's batch scans give)."""
    cols: tuple[list, ...] = ([], [], [], [], [], [])
    for entry in entries:
        found = extract(entry.base_offset, memoryview(entry.data))
        for column, values in zip(cols, (*found, [entry.base_offset] * len(found[0]),
                                         [entry.record_count] * len(found[0]))):
            column += values
    return pa.table(list(cols), schema=key_view.KEY_SCHEMA)


async def write(stream, recs: list[tuple[bytes, bytes]]) -> int:
    data = b";".join(k + b"=" + v for k, v in recs)
    return (await stream.append(data, len(recs))).base_offset


def model(log: list[tuple[int, bytes, bytes]], horizon: int) -> dict[int, tuple[bytes | None, bytes]]:
    latest: dict[bytes, int] = {}
    for offset, key, _ in log:
        if offset < horizon and key:
            latest[key] = offset
    return {o: (k or None, v) for o, k, v in log
            if o < horizon and (not k or latest[k] == o) and v}


def seen(view) -> dict[int, tuple[bytes | None, bytes]]:
    out = {}
    for item in view.read(0, max_bytes=1 << 40):
        recs = bytes(item.entry.data).split(b";")
        for i in item.keep:
            key, _, value = recs[i].partition(b"=")
            out[item.entry.base_offset + i] = (key or None, value)
    return out


def known_runs(entries: list[FetchedEntry], rng: random.Random) -> list[key_view.KnownKeys]:
    """Keys of random runs of ``entries`` (the others left to the build's reads)."""
    out, i = [], 0
    while i < len(entries):
        j = min(len(entries), i + rng.randint(1, 12))
        if rng.random() < 0.7:
            run = entries[i:j]
            out.append((run[0].base_offset, run[-1].end_offset, *key_view.latest_rows(extract_many(run))))
        i = j
    return out


@pytest.mark.parametrize("mode", ["per-entry", "ranges-reduced-apart", "known-keys"])
async def test_incremental_views_match_the_model(storage, meta, objects, monkeypatch, mode):
    if mode != "per-entry":  # ranges of a few entries, each reduced to its latest per key before the merge
        monkeypatch.setattr(key_view, "_EXTRACT_BYTES", 64)
    stream = await storage.open_stream("kv", create=True)
    rng = random.Random(7)
    log: list[tuple[int, bytes, bytes]] = []
    horizon_before = 0
    stale: list[key_view.KnownKeys] = []  # keys of ranges an earlier view covers: no effect
    for round_ in range(3):
        entries = []
        for _ in range(60):
            recs = []
            for _ in range(rng.randint(1, 4)):
                key = b"" if rng.random() < 0.05 else b"k%d" % rng.randrange(20)
                value = b"" if key and rng.random() < 0.1 else b"v%d" % len(log + recs)
                recs.append((key, value))
            base = await write(stream, recs)
            entries.append(FetchedEntry(base, len(recs), b";".join(k + b"=" + v for k, v in recs)))
            log += [(base + i, k, v) for i, (k, v) in enumerate(recs)]
        horizon = stream.next_offset()
        known = known_runs(entries, rng) if mode == "known-keys" else None
        async with lease(meta, stream.stream_id, "test"):
            result = await key_view.build(meta, objects, storage.reader, stream.stream_id, extract,
                                          horizon=horizon, delete_retention_ms=0, lease_owner="test",
                                          extract_many=None if mode == "per-entry" else extract_many,
                                          known=None if known is None else [*stale, *known])
        assert result.horizon == horizon
        assert result.input_records == sum(1 for o, _, _ in log if o >= horizon_before)
        if known:
            stale = known
            assert result.input_bytes < sum(len(e.data) for e in entries)  # known ranges: survivors read only
        horizon_before = horizon
        _, view = await key_view.load(meta, objects, stream.stream_id)
        assert view.horizon == horizon
        assert seen(view) == model(log, horizon), f"round {round_}"
    # Reading from an offset inside the view skips what lies before it.
    middle = sorted(seen(view))[len(seen(view)) // 2]
    first = view.read(middle)[0]
    assert first.entry.base_offset + first.keep[-1] >= middle


async def test_tombstones_stay_until_their_retention(storage, meta, objects):
    stream = await storage.open_stream("tomb", create=True)
    await write(stream, [(b"t1000", b"a"), (b"t1000", b""), (b"x", b"1")])
    sid = stream.stream_id
    await key_view.build(meta, objects, storage.reader, sid, extract, horizon=stream.next_offset(),
                         delete_retention_ms=500, now_ms=1400)
    _, view = await key_view.load(meta, objects, sid)
    assert seen(view) == {1: (b"t1000", b""), 2: (b"x", b"1")}  # the tombstone is still there
    await write(stream, [(b"y", b"2")])
    await key_view.build(meta, objects, storage.reader, sid, extract, horizon=stream.next_offset(),
                         delete_retention_ms=500, now_ms=1600)
    _, view = await key_view.load(meta, objects, sid)
    assert view.records == 2 and seen(view) == {2: (b"x", b"1"), 3: (b"y", b"2")}


async def test_a_failed_switch_keeps_the_old_view_and_gc_frees_exactly_the_replaced(storage, meta, objects):
    stream = await storage.open_stream("gcv", create=True)
    sid = stream.stream_id
    await write(stream, [(b"a", b"1"), (b"b", b"1")])
    first = await key_view.build(meta, objects, storage.reader, sid, extract, horizon=stream.next_offset())
    await write(stream, [(b"a", b"2")])
    # Another builder's switch in between: this one must not land.
    async with lease(meta, sid, "someone-else"):
        with pytest.raises(CompactionConflict):
            await key_view.build(meta, objects, storage.reader, sid, extract, horizon=stream.next_offset(),
                                 lease_owner="me")
    assert (await key_view.state(meta, sid)).object == first.object
    second = await key_view.build(meta, objects, storage.reader, sid, extract, horizon=stream.next_offset())
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=0)
    await collector.collect()
    await collector.collect()
    names = {k for k in objects.inner._bucket.objects if k.startswith("keyview/")}
    assert names == {second.object}
    _, view = await key_view.load(meta, objects, sid)
    assert seen(view) == {1: (b"b", b"1"), 2: (b"a", b"2")}


async def test_a_dead_builder_is_finished_or_undone_by_the_collector(storage, meta, objects):
    stream = await storage.open_stream("dead", create=True)
    sid = stream.stream_id
    await write(stream, [(b"a", b"1")])
    first = await key_view.build(meta, objects, storage.reader, sid, extract, horizon=stream.next_offset())
    await write(stream, [(b"a", b"2")])
    # A builder that died after its object put, before the switch: the marker is all that is left.
    orphan = "keyview/orphan.parquet"
    await objects.put_if_absent(orphan, b"x")
    await meta.put(records.gc_pending_key(orphan), records.encode(
        {"ts": 0, "kind": "keyview", "object": orphan, "stream": sid, "previous": first.object}))
    await gc.seal(meta, orphan, [(sid, key_view.VIEW_REF)])
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=0)
    await collector.collect()
    await collector.collect()
    names = {k for k in objects.inner._bucket.objects if k.startswith("keyview/")}
    assert names == {first.object}
    assert (await key_view.state(meta, sid)).object == first.object


async def test_deleting_the_stream_releases_its_view(storage, meta, objects):
    stream = await storage.open_stream("gone", create=True)
    await write(stream, [(b"a", b"1")])
    await key_view.build(meta, objects, storage.reader, stream.stream_id, extract, horizon=stream.next_offset())
    await storage.delete_stream("gone")
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=0)
    await collector.collect()
    await collector.collect()
    assert not [k for k in objects.inner._bucket.objects if k.startswith("keyview/")]


def test_dropped_between_is_the_complement_of_the_survivors_below_the_horizon():
    from nereus.storage.api import FetchedEntry

    rng = random.Random(7)
    for _ in range(200):
        items, base = [], rng.randrange(0, 5)
        for _ in range(rng.randrange(0, 6)):
            count = rng.randrange(1, 6)
            keep = tuple(sorted(rng.sample(range(count), rng.randrange(1, count + 1))))
            items.append(key_view.ViewEntry(FetchedEntry(base, count, b""), keep))
            base += count + rng.randrange(0, 3)
        horizon = base + rng.randrange(0, 3)
        view = key_view.KeyView(1, horizon, None, items)
        kept = {e.entry.base_offset + k for e in items for k in e.keep}
        for start in range(0, horizon + 1):
            for end in range(start, horizon + 1):
                ranges = view.dropped_between(start, end)
                assert [o for s, e in ranges for o in range(s, e)] == [
                    o for o in range(start, end) if o not in kept]
                assert all(s < e for s, e in ranges)
                assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:]))


def test_a_build_lets_go_of_the_entries_whose_records_were_all_replaced():
    from nereus.storage.api import FetchedEntry

    first = [FetchedEntry(0, 2, b"a=1;b=1"), FetchedEntry(2, 2, b"a=2;b=2"), FetchedEntry(4, 1, b"=x")]
    reduced, count = key_view.latest_of(extract_many, first)
    assert count == 5 and sorted(reduced.column("offset").to_pylist()) == [2, 3, 4]  # keyless rows stay
    new = key_view_rows.BuildInput()
    new.add_entries(first)
    second = [FetchedEntry(5, 1, b"a=3"), FetchedEntry(6, 1, b"b=3")]
    new.add_entries(second)  # read before the first range's keys are back: kept meanwhile
    new.add_keys(reduced, count, True)
    assert sorted(new.entries) == [2, 4, 5, 6] and new.records == 5  # the entry at 0 has no survivor
    new.add_keys(*key_view.latest_of(extract_many, second), True)
    assert sorted(new.entries) == [4, 5, 6] and new.records == 7  # later ranges replace earlier rows too
    assert sorted(new.table().column("offset").to_pylist()) == [4, 5, 6]


async def test_a_build_leaves_the_block_cache_to_readers(storage, meta, objects):
    from nereus.storage import StreamStorage

    from .conftest import FAST

    stream = await storage.open_stream("cold", create=True)
    for i in range(20):
        await write(stream, [(b"k%d" % (i % 3), b"v%d" % i)])
    horizon = stream.next_offset()
    # Nothing of the stream cached; the same WAL replicas within reach (objects may not be uploaded yet).
    cold = StreamStorage(meta, objects, node_id="node-b", options=FAST, directory=storage.directory)
    try:
        result = await key_view.build(meta, objects, cold.reader, stream.stream_id, extract, horizon=horizon,
                                      delete_retention_ms=0)
        assert result.records == 3 and cold.reader.block_cache.bytes == 0  # the whole-stream scan kept nothing
        await cold.reader.read(stream.stream_id, 0, horizon, 1 << 20)
        assert cold.reader.block_cache.bytes > 0  # as a reader's reads do
    finally:
        await cold.close()


async def test_known_keys_naming_no_entry_fail_the_build_and_keep_the_view(storage, meta, objects):
    stream = await storage.open_stream("wrong-keys", create=True)
    await write(stream, [(b"a", b"1"), (b"b", b"2")])
    await write(stream, [(b"a", b"3")])
    horizon = stream.next_offset()
    rows = extract_many([FetchedEntry(0, 2, b"a=1;b=2"), FetchedEntry(2, 1, b"a=3")])
    shifted = rows.set_column(4, "entry_base", pa.array([1, 1, 3], pa.int64()))  # no entry begins at 1 or 3
    with pytest.raises(key_view.KnownKeysMismatch):
        await key_view.build(meta, objects, storage.reader, stream.stream_id, extract, horizon=horizon,
                             delete_retention_ms=0, extract_many=extract_many, known=[(0, horizon, shifted, 3)])
    assert (await key_view.state(meta, stream.stream_id)).object is None
    await key_view.build(meta, objects, storage.reader, stream.stream_id, extract, horizon=horizon,
                         delete_retention_ms=0, extract_many=extract_many, known=[(0, horizon, rows, 3)])
    _, view = await key_view.load(meta, objects, stream.stream_id)
    assert seen(view) == {1: (b"b", b"2"), 2: (b"a", b"3")}


async def test_known_keys_past_the_horizon_are_read_from_the_stream_instead(storage, meta, objects):
    stream = await storage.open_stream("cut-keys", create=True)
    entries = []
    for recs in ([(b"a", b"1"), (b"b", b"2")], [(b"a", b"3")], [(b"a", b"4"), (b"c", b"5")]):
        base = await write(stream, recs)
        entries.append(FetchedEntry(base, len(recs), b";".join(k + b"=" + v for k, v in recs)))
    # Reduced over [0, 5): a's latest row is at 3, past a horizon of 3 (its row at 2 is gone).
    whole = (0, 5, *key_view.latest_rows(extract_many(entries)))
    await key_view.build(meta, objects, storage.reader, stream.stream_id, extract, horizon=3,
                         delete_retention_ms=0, extract_many=extract_many, known=[whole])
    _, view = await key_view.load(meta, objects, stream.stream_id)
    assert seen(view) == {1: (b"b", b"2"), 2: (b"a", b"3")}
    await key_view.build(meta, objects, storage.reader, stream.stream_id, extract, horizon=5,
                         delete_retention_ms=0, extract_many=extract_many, known=[whole])
    _, view = await key_view.load(meta, objects, stream.stream_id)
    assert seen(view) == {1: (b"b", b"2"), 3: (b"a", b"4"), 4: (b"c", b"5")}
