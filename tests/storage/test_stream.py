"""StreamStorage behaviour on the embedded metadata engine and a memory object store."""

import asyncio
import os
import time

import pytest

from nereus.objstore import open_object_store
from nereus.storage import (AppendSessionLost, CorruptObject, InvalidAppend, InvalidStreamName, OffsetOutOfRange, StreamExists,
                            StreamNotFound, StreamStorage)
from nereus.storage.collector import GarbageCollector

from .conftest import FAST



async def read_all(stream, start=0, max_bytes=1 << 20):
    out = []
    offset = start
    while offset < stream.next_offset():
        result = await stream.fetch(offset, max_bytes=max_bytes)
        assert result.entries, "a readable offset must give at least one entry"
        out.extend(result.entries)
        offset = result.entries[-1].end_offset
    return out


async def test_append_assigns_dense_offsets_and_fetch_returns_the_bytes(storage):
    stream = await storage.open_stream("s", create=True)
    offsets = [(await stream.append(b"entry-%d" % i, 3)).base_offset for i in range(5)]
    assert offsets == [0, 3, 6, 9, 12]
    assert stream.next_offset() == 15
    entries = await read_all(stream)
    assert [(e.base_offset, e.record_count, bytes(e.data)) for e in entries] == \
        [(3 * i, 3, b"entry-%d" % i) for i in range(5)]


async def test_concurrent_appends_of_many_streams_share_one_object(storage, objects):
    streams = [await storage.open_stream(f"s{i}", create=True) for i in range(20)]
    for s in streams:  # acquire sessions first so the timing below is one flush
        await s.append(b"warm-up", 1)
    before = objects.calls["put_if_absent"]
    results = await asyncio.gather(*(s.append(b"x" * 100, 1) for s in streams))
    assert all(r.base_offset == 1 for r in results)
    assert objects.calls["put_if_absent"] - before == 1


async def test_flush_on_size_before_the_timer(meta, objects):
    from nereus.storage import StorageOptions, WalOptions
    storage = StreamStorage(meta, objects, options=StorageOptions(wal=WalOptions(flush_interval=30,
                                                                                  max_object_bytes=4096)))
    stream = await storage.open_stream("big", create=True)
    results = await asyncio.wait_for(asyncio.gather(*(stream.append(b"y" * 1024, 1) for _ in range(8))), 5)
    assert [r.base_offset for r in results] == list(range(8))
    await storage.close()


async def test_fetch_ranges_and_limits(storage):
    stream = await storage.open_stream("r", create=True)
    for i in range(10):
        await stream.append(bytes([i]) * 100, 10)
    # start inside an entry: that whole entry comes back first
    got = await stream.fetch(15, 35)
    assert [e.base_offset for e in got.entries] == [10, 20, 30]
    # max_bytes limits, but never below one entry
    got = await stream.fetch(0, max_bytes=1)
    assert [e.base_offset for e in got.entries] == [0]
    got = await stream.fetch(100)
    assert got.entries == [] and got.next_offset == 100
    with pytest.raises(OffsetOutOfRange):
        await stream.fetch(101)
    with pytest.raises(OffsetOutOfRange):
        await stream.fetch(-1)


async def test_catch_up_reads_come_from_objects(meta, objects, storage):
    stream = await storage.open_stream("c", create=True)
    payloads = [os.urandom(500) for _ in range(30)]
    for p in payloads:
        await stream.append(p, 2)
    await storage.close()
    reader = StreamStorage(meta, objects, node_id="reader", options=FAST)  # cold caches
    handle = await reader.open_stream("c")
    await handle.refresh()
    before = objects.calls["get"]
    entries = await read_all(handle, max_bytes=4000)
    assert [bytes(e.data) for e in entries] == payloads
    assert objects.calls["get"] > before
    await reader.close()


async def test_recent_slices_are_read_from_the_tail_until_their_group_is_written(meta, objects, storage):
    from nereus.storage import records
    from nereus.storage.session import GROUP_SIZE
    stream = await storage.open_stream("t", create=True)
    partition = records.stream_partition(stream.stream_id)
    for i in range(GROUP_SIZE + 2):
        await stream.append(b"%d" % i, 1)
    await stream.close()
    groups = [k async for k in meta.list(*records.index_range(stream.stream_id), partition_key=partition)]
    assert groups == [records.index_key(stream.stream_id, GROUP_SIZE - 1)]  # one full group, 2 slices pending
    reader = StreamStorage(meta, objects, node_id="reader", options=FAST)  # cold caches
    handle = await reader.open_stream("t")
    await handle.refresh()
    assert [bytes(e.data) for e in (await handle.fetch(0)).entries] == [b"%d" % i for i in range(GROUP_SIZE + 2)]
    # a new append session turns what the old one left pending into a group
    await handle.append(b"next", 1)
    groups = [k async for k in meta.list(*records.index_range(stream.stream_id), partition_key=partition)]
    assert groups[-1] == records.index_key(stream.stream_id, GROUP_SIZE + 1)
    assert [bytes(e.data) for e in (await handle.fetch(GROUP_SIZE)).entries] == [b"8", b"9", b"next"]
    await reader.close()


async def test_a_read_finds_slices_that_moved_from_the_tail_into_a_group_while_it_looked(meta, objects, storage):
    """A writer puts a group's idx key, then drops its slices from the tail's pending. A reader that
    scanned the idx keys before the first step and reads the tail after the second sees the slices
    in neither: it scans again rather than answer that the offsets have no entry."""
    from nereus.storage import records
    stream = await storage.open_stream("moved", create=True)
    for i in range(3):
        await stream.append(b"%d" % i, 1)
    await stream.close()
    partition = records.stream_partition(stream.stream_id)
    reader = StreamStorage(meta, objects, node_id="reader", options=FAST)  # cold caches
    read_tail, moved = reader.reader._tail, []

    async def tail_after_the_move(stream_id):
        if not moved:  # the scan found no idx key: now the writer's two steps happen
            tail = await read_tail(stream_id)
            assert len(tail.pending) == 3
            await meta.put(records.index_key(stream_id, tail.pending[-1].last),
                           records.encode_group([records.encode_entry_json(e) for e in tail.pending]),
                           partition_key=partition)
            await meta.put(records.tail_key(stream_id),
                           records.Tail(tail.next, tail.size, tail.token).encode(), partition_key=partition)
            moved.append(True)
        return await read_tail(stream_id)

    reader.reader._tail = tail_after_the_move
    handle = await reader.open_stream("moved")
    await handle.refresh()
    assert [bytes(e.data) for e in (await handle.fetch(0)).entries] == [b"0", b"1", b"2"]
    assert moved
    await reader.close()


async def test_slow_streams_write_partial_groups_once_their_oldest_slice_is_old(meta, objects, storage,
                                                                             monkeypatch):
    import asyncio

    from nereus.storage import records, session
    monkeypatch.setattr(session, "GROUP_MAX_AGE_MS", 100)
    stream = await storage.open_stream("slow", create=True)
    partition = records.stream_partition(stream.stream_id)
    for i in range(3):
        await stream.append(b"%d" % i, 1)
    assert [k async for k in meta.list(*records.index_range(stream.stream_id), partition_key=partition)] == []
    await asyncio.sleep(0.15)
    await stream.append(b"3", 1)  # the commit that finds the old slices writes them as a group
    groups = [k async for k in meta.list(*records.index_range(stream.stream_id), partition_key=partition)]
    assert groups == [records.index_key(stream.stream_id, 2)]
    await stream.append(b"4", 1)  # the tail drops grouped slices at the commit after the group write
    tail = records.Tail.decode((await meta.get(records.tail_key(stream.stream_id), partition_key=partition)).value)
    assert [e.base for e in tail.pending] == [3, 4]
    assert [bytes(e.data) for e in (await stream.fetch(0)).entries] == [b"0", b"1", b"2", b"3", b"4"]


async def test_names_are_unique_and_unknown_streams_fail(storage):
    await storage.create_stream("persistent://public/default/a")
    with pytest.raises(StreamExists):
        await storage.create_stream("persistent://public/default/a")
    with pytest.raises(StreamNotFound):
        await storage.open_stream("nope")
    with pytest.raises(InvalidStreamName):
        await storage.create_stream("")
    assert await storage.list_streams() == ["persistent://public/default/a"]


async def test_a_stream_likely_absent_is_created_unread_and_one_made_meanwhile_is_opened(meta, objects, storage):
    from nereus.storage import records

    names_read: list[str] = []
    read = meta.get

    async def get(key, *args, **kwargs):
        if key.startswith(records.name_key("")):
            names_read.append(key)
        return await read(key, *args, **kwargs)

    meta.get = get
    try:
        fresh = await storage.open_stream("fresh", create=True, likely_absent=True)
        assert fresh.created and names_read == []
        other = StreamStorage(meta, objects, node_id="other", options=FAST)
        made = await other.open_stream("made-meanwhile", create=True)
        await made.append(b"theirs", 1)
        names_read.clear()
        opened = await storage.open_stream("made-meanwhile", create=True, likely_absent=True)
        assert (opened.stream_id, opened.created) == (made.stream_id, False)
        assert names_read == [records.name_key("made-meanwhile")]  # read once it was found taken
        await opened.refresh()
        assert [bytes(e.data) for e in (await opened.fetch(0)).entries] == [b"theirs"]
        # The failed creation took the next id of this storage's block: no record names it.
        assert not await storage.exists(fresh.stream_id + 1)
        await other.close()
    finally:
        del meta.get


async def test_listing_by_prefix_reads_one_namespace_page_by_page(storage):
    names = [f"persistent://t/ns/topic-{i:02d}" for i in range(25)] + ["persistent://t/ns/a b", "persistent://t/ns/x%y"]
    others = ["persistent://t/ns2/topic-00", "persistent://t/n/topic-00", "persistent://t/nsx", "non-persistent://t/ns/q"]
    for name in names + others:
        await storage.create_stream(name)
    listed = await storage.list_streams("persistent://t/ns/")
    assert sorted(listed) == sorted(names)
    for limit in (1, 7, 27, 100):
        paged, after = [], None
        while True:
            page = await storage.list_streams_page("persistent://t/ns/", start_after=after, limit=limit)
            paged += page
            if len(page) < limit:
                break
            after = page[-1]
        assert paged == listed
    assert sorted(await storage.list_streams()) == sorted(names + others)


@pytest.mark.parametrize("entry,count", [(b"", 1), (b"x", 0), (b"x", -5), ("text", 1), (b"x", 1.5)])
async def test_bad_appends_are_rejected_and_change_nothing(storage, entry, count):
    stream = await storage.open_stream("bad", create=True)
    await stream.append(b"good", 1)
    with pytest.raises(InvalidAppend):
        await stream.append(entry, count)
    assert (await stream.append(b"good2", 1)).base_offset == 1


async def test_trim_hides_records_and_gc_deletes_released_objects(meta, objects, storage):
    stream = await storage.open_stream("g", create=True)
    for i in range(20):  # one object per append (each waited for its flush): groups 0-7, 8-15, pending 16-19
        await stream.append(b"%d" % i, 1)
    await stream.trim(12)
    assert stream.start_offset() == 12
    with pytest.raises(OffsetOutOfRange):
        await stream.fetch(11)
    assert [bytes(e.data) for e in (await stream.fetch(12)).entries][:2] == [b"12", b"13"]
    await stream.trim(2)  # never lowers the start
    assert stream.start_offset() == 12
    with pytest.raises(OffsetOutOfRange):
        await stream.trim(21)
    collector = GarbageCollector(meta, objects, grace_seconds=10, pending_timeout_seconds=7200,
                                 clock=lambda: time.time() + 3600)  # the live writer's block is not due
    stats = await collector.collect()
    assert stats.deleted == 8  # the first group; the second still holds readable offsets 12-15
    assert objects.calls["delete"] == 8
    assert [bytes(e.data) for e in (await stream.fetch(12)).entries][:2] == [b"12", b"13"]
    await stream.trim(20)  # everything: only groups clear of the tail's pending slices go
    assert (await collector.collect()).deleted == 8


async def test_failed_object_put_fails_the_appenders_and_is_collected(meta, objects, storage):
    stream = await storage.open_stream("f", create=True)
    await stream.append(b"ok", 1)
    objects.fail_puts(lambda key: True)
    with pytest.raises(Exception, match="injected"):
        await stream.append(b"lost", 1)
    objects.clear_faults()
    with pytest.raises(AppendSessionLost):  # nothing commits behind a failed append ...
        await stream.append(b"after", 1)
    await stream.acquire()  # ... until the owner takes a new session
    assert (await stream.append(b"after", 1)).base_offset == 1
    await storage.writer.flush()  # let the last object's seal finish
    await storage.close()  # the failed name is sealed with no live slice, hence freed
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=0)
    first = await collector.collect()
    assert first.deleted == 1
    assert await collector.collect() == type(first)()
    reader = await StreamStorage(meta, objects, node_id="reader").open_stream("f")
    assert [bytes(e.data) for e in (await reader.fetch(0)).entries] == [b"ok", b"after"]
    assert len(objects.inner.keys()) == 2  # the failed object and the tombstones are gone


async def test_delete_stream_releases_everything(meta, objects, storage):
    stream = await storage.open_stream("d", create=True)
    for i in range(3):
        await stream.append(b"%d" % i, 1)
    await storage.delete_stream("d")
    from nereus.storage import records
    partition = records.stream_partition(stream.stream_id)
    for lo, hi in records.subtree_ranges(partition):
        assert [k async for k in meta.list(lo, hi, partition_key=partition)] == []
    with pytest.raises(StreamNotFound):
        await storage.open_stream("d")
    stats = await GarbageCollector(meta, objects, grace_seconds=0).collect()
    assert stats.deleted == 3


async def test_corrupt_object_bytes_are_detected_not_served(tmp_path, meta):
    objects = open_object_store(tmp_path.as_uri())
    writer = StreamStorage(meta, objects, options=FAST)
    stream = await writer.open_stream("x", create=True)
    await stream.append(b"A" * 1000, 1)
    await stream.append(b"B" * 1000, 1)
    await writer.close()
    wal_files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    victim = wal_files[0]
    blob = bytearray(victim.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    os.chmod(victim, 0o644)
    victim.write_bytes(bytes(blob))
    reader = StreamStorage(meta, objects, options=FAST)
    handle = await reader.open_stream("x")
    await handle.refresh()
    with pytest.raises(CorruptObject):
        await handle.fetch(0, 1)
    assert [bytes(e.data) for e in (await handle.fetch(1)).entries] == [b"B" * 1000]
    await reader.close()


async def test_wait_for_wakes_on_commit(storage):
    stream = await storage.open_stream("w", create=True)
    waiter = asyncio.ensure_future(stream.wait_for(0, 5))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    await stream.append(b"z", 1)
    assert await waiter is True
    assert await stream.wait_for(5, 0.05) is False


async def test_retention_by_size_and_age_trims_whole_slices(storage):
    from nereus.storage.retention import RetentionPolicy, enforce
    stream = await storage.open_stream("ret", create=True)
    for i in range(10):
        await stream.append(b"%d" % i * 100, 2)  # 100 bytes a slice (each append flushed alone)
    await storage.writer.flush()
    slice_bytes = (await storage.tail(stream.stream_id)).size // 10
    start = await enforce(storage, stream.stream_id, RetentionPolicy(max_bytes=slice_bytes * 4))
    assert start == 12  # six slices of two records dropped, four kept
    assert await enforce(storage, stream.stream_id, RetentionPolicy(max_age_seconds=3600)) == 12
    import time as _time
    start = await enforce(storage, stream.stream_id, RetentionPolicy(max_age_seconds=1), now=_time.time() + 60)
    assert start == 20  # everything is old: nothing stays readable, offsets continue
    await stream.refresh()
    assert (await stream.fetch(20)).entries == []
    assert (await stream.append(b"new", 1)).base_offset == 20


async def test_a_new_session_never_writes_a_group_overlapping_an_existing_one(meta, objects, storage):
    from nereus.storage import records
    from nereus.storage.session import GROUP_SIZE
    stream = await storage.open_stream("ov", create=True)
    partition = records.stream_partition(stream.stream_id)
    for i in range(GROUP_SIZE + 1):  # the 9th commit writes group 0-7; the tail still lists 0-8
        await stream.append(b"%d" % i, 1)
    tail = records.Tail.decode((await meta.get(records.tail_key(stream.stream_id), partition_key=partition)).value)
    assert [e.base for e in tail.pending] == list(range(GROUP_SIZE + 1))
    other = StreamStorage(meta, objects, node_id="other", options=FAST)
    handle = await other.open_stream("ov")
    await handle.append(b"next", 1)  # acquire: groups what the old session left
    groups = [records.decode_group(r.value) async for r in
              meta.range_scan(*records.index_range(stream.stream_id), partition_key=partition)]
    assert [(g[0].base, g[-1].last) for g in groups] == [(0, GROUP_SIZE - 1), (GROUP_SIZE, GROUP_SIZE)]
    assert [bytes(e.data) for e in (await handle.fetch(0, max_bytes=1 << 20)).entries] == \
        [b"%d" % i for i in range(GROUP_SIZE + 1)] + [b"next"]
    await other.close()


async def test_many_streams_created_at_once_from_two_processes_get_distinct_ids(meta, objects):
    """Creation does not race on one counter key (ids come in blocks), and a name gets one id."""
    a = StreamStorage(meta, objects, node_id="a", options=FAST)
    b = StreamStorage(meta, objects, node_id="b", options=FAST)
    names = [f"many-{i}" for i in range(500)]
    handles = await asyncio.gather(*(s.open_stream(n, create=True) for n in names for s in (a, b)))
    by_name: dict[str, set[int]] = {}
    for handle in handles:
        by_name.setdefault(handle.name, set()).add(handle.stream_id)
    assert all(len(ids) == 1 for ids in by_name.values())  # both processes agree on each name's id
    ids = [next(iter(v)) for v in by_name.values()]
    assert len(set(ids)) == len(names)
    await a.close()
    await b.close()
