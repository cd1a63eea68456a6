"""Compaction by generation replacement at the storage layer (no protocol, no Spark).

The encoder here stores only the entry columns (one row per entry); the lakehouse
adds record columns. What matters here: offsets and bytes never change, the switch
is atomic, a crash at every step leaves no change or the complete change, GC
collects exactly what nothing refers to, pins hold objects, readers fall back.
"""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from nereus.storage import compacted_format, compaction, records, wal_groups
from nereus.storage.collector import GarbageCollector
from nereus.storage.compaction_lease import lease
from nereus.storage.errors import CompactionConflict, CorruptObject, StorageError
from nereus.storage.gc import pin, unpin
from nereus.storage.records import Tail
from tests.storage.conftest import settle


@pytest.fixture
def storage(storage_on_each_wal):
    """Each test once with the object WAL and once with WAL replicas on disk (tests/storage/conftest.py)."""
    return storage_on_each_wal


def encode(stream_id: int, first: int, entries, generation: int) -> bytes:
    columns = compacted_format.entry_columns([[e] for e in entries])
    table = pa.table({"n": pa.array(range(len(entries)), pa.int64()), **columns})
    header = compacted_format.CompactedHeader(stream_id, first, sum(c for c, _ in entries), len(entries), generation)
    return compacted_format.encode(table, header)


async def fill(storage, name: str, appends: int):
    """A stream of ``appends`` flushes (one slice each): appends // 8 idx groups, the rest pending."""
    stream = await storage.open_stream(name, create=True)
    expected = []
    for i in range(appends):
        count = 1 + i % 3
        data = b"%s-%d-" % (name.encode(), i) + bytes([128 + i % 100]) * 50  # high bytes: signedness matters
        base = (await stream.append(data, count)).base_offset
        expected.append((base, count, data))
    return stream, expected


async def read_all(stream, start: int = 0):
    out = []
    offset = start
    while offset < stream.next_offset():
        result = await stream.fetch(offset, max_bytes=300)
        assert result.entries
        out += [(e.base_offset, e.record_count, bytes(e.data)) for e in result.entries]
        offset = result.entries[-1].end_offset
    return out


async def index_of(meta, stream_id):
    lo, hi = records.index_range(stream_id)
    part = records.stream_partition(stream_id)
    return [records.decode_group(r.value) async for r in meta.range_scan(lo, hi, partition_key=part)]


def stored(objects) -> set[str]:
    return set(objects.inner._bucket.objects)


async def referenced(meta, stream_ids) -> set[str]:
    """The objects the streams' index entries refer to (a WAL replica object: its upload group)."""
    keys = set()
    for sid in stream_ids:
        for group in await index_of(meta, sid):
            keys |= {e.object for e in group}
        tail = await meta.get(records.tail_key(sid), partition_key=records.stream_partition(sid))
        keys |= {e.object for e in Tail.decode(tail.value).pending}
    return {stored_as(key) for key in keys}


def stored_as(key: str) -> str:
    """The object in the store that holds ``key``'s bytes (a WAL replica object: its upload group)."""
    return (wal_groups.group_of(key) or (key,))[0]


async def collect_all(meta, objects):
    """Resolve every marker and delete every freed object now."""
    await settle()
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=0,
                                 clock=lambda: time.time() + 3600)
    await collector.collect()
    await collector.collect()


async def test_compaction_keeps_offsets_and_bytes_and_frees_the_wal(meta, objects, storage):
    a, expected_a = await fill(storage, "a", 35)  # 4 groups + 3 pending slices
    b, expected_b = await fill(storage, "b", 17)
    plans = await compaction.plan(meta, a.stream_id, target_bytes=1)  # one plan per group
    assert len(plans) == 4
    plans = await compaction.plan(meta, a.stream_id)
    assert len(plans) == 1 and plans[0].first == 0 and plans[0].last == expected_a[31][0] + expected_a[31][1] - 1
    result = await compaction.compact(meta, objects, storage.reader, plans[0], encode)
    assert result.generation == 1
    groups = await index_of(meta, a.stream_id)
    assert len(groups) == 1 and groups[0][0].compacted and groups[0][0].object == result.object
    assert len(groups[0][0].fallback) == 32
    assert groups[0][0].size_before == 0 and groups[0][0].size == plans[0].slices[-1].size  # stream bytes, not Parquet
    storage.reader.block_cache = type(storage.reader.block_cache)(1 << 20)  # no cached WAL slices
    assert await read_all(a) == expected_a
    assert await read_all(a, start=expected_a[10][0] + 1) == [e for e in expected_a if e[0] + e[1] > expected_a[10][0] + 1]
    assert await compaction.plan(meta, a.stream_id) == []  # nothing left below the pending slices
    await collect_all(meta, objects)
    assert stored(objects) == await referenced(meta, [a.stream_id, b.stream_id])
    assert await read_all(a) == expected_a and await read_all(b) == expected_b
    # appends go on after compaction; the next run compacts the new groups only
    for i in range(16):
        expected_a.append(((await a.append(b"more-%d" % i, 1)).base_offset, 1, b"more-%d" % i))
    plans = await compaction.plan(meta, a.stream_id)
    assert len(plans) == 1 and plans[0].first == result.last + 1
    await compaction.compact(meta, objects, storage.reader, plans[0], encode)
    await collect_all(meta, objects)
    assert await read_all(a) == expected_a
    assert stored(objects) == await referenced(meta, [a.stream_id, b.stream_id])


async def test_trim_after_compaction_releases_the_compacted_object(meta, objects, storage):
    a, expected = await fill(storage, "t", 24)
    (job,) = await compaction.plan(meta, a.stream_id)
    result = await compaction.compact(meta, objects, storage.reader, job, encode)
    await a.trim(result.last)  # inside the compacted range: the object stays
    await collect_all(meta, objects)
    assert result.object in stored(objects)
    assert (await read_all(a, result.last))[0][0] <= result.last
    await a.trim(result.last + 1)
    await collect_all(meta, objects)
    assert result.object not in stored(objects)
    assert stored(objects) == await referenced(meta, [a.stream_id])


async def test_pins_keep_freed_objects(meta, objects, storage):
    a, expected = await fill(storage, "p", 16)
    (job,) = await compaction.plan(meta, a.stream_id)
    wal = {stored_as(e.object) for e in job.slices}
    await pin(meta, job.slices[0].object, "reader-1")
    await pin(meta, job.slices[1].object, "reader-2", ttl_seconds=0.001)  # expired by the collector's clock
    await compaction.compact(meta, objects, storage.reader, job, encode)
    await collect_all(meta, objects)
    still = wal & await referenced(meta, [a.stream_id])  # an upload group shared with the pending slices
    assert stored(objects) & wal == {stored_as(job.slices[0].object)} | still  # (a member pinned: its group)
    await unpin(meta, job.slices[0].object, "reader-1")
    await collect_all(meta, objects)
    assert stored(objects) & wal == still


async def test_missing_compacted_object_falls_back_to_the_replaced_slices(meta, objects, storage):
    a, expected = await fill(storage, "m", 16)
    for e in (await compaction.plan(meta, a.stream_id))[0].slices:
        await pin(meta, e.object, "test")  # keep the WAL objects although released
    (job,) = await compaction.plan(meta, a.stream_id)
    result = await compaction.compact(meta, objects, storage.reader, job, encode)
    await collect_all(meta, objects)
    await objects.inner.delete(result.object)
    storage.reader.block_cache = type(storage.reader.block_cache)(1 << 20)
    assert await read_all(a) == expected


async def test_concurrent_changes_abort_the_compaction(meta, objects, storage):
    a, expected = await fill(storage, "c", 24)
    (job,) = await compaction.plan(meta, a.stream_id)
    await a.trim(expected[8][0])  # deletes the first group under the plan
    with pytest.raises(CompactionConflict):
        await compaction.compact(meta, objects, storage.reader, job, encode)
    (again,) = await compaction.plan(meta, a.stream_id)
    assert again.first > 0
    await compaction.compact(meta, objects, storage.reader, again, encode)
    assert await read_all(a, expected[8][0]) == expected[8:]


class Crash(Exception):
    pass


def _raise_after(fn):
    async def wrapped(*args, **kwargs):
        await fn(*args, **kwargs)
        raise Crash()
    return wrapped


@pytest.mark.parametrize("step", ["object-put", "object-put-landed", "seal", "switch", "finish-half", "abort"])
async def test_a_crash_at_any_step_leaves_no_change_or_the_whole_change(meta, objects, storage, monkeypatch, step):
    a, expected = await fill(storage, "x", 27)
    (job,) = await compaction.plan(meta, a.stream_id)
    before = {stored_as(e.object) for e in job.slices}
    with monkeypatch.context() as patch:
        if step == "object-put":
            objects.fail_puts(lambda key: key.startswith("compacted/"), exc=Crash)
        elif step == "object-put-landed":
            objects.fail_puts(lambda key: key.startswith("compacted/"), exc=Crash, after=True)
        elif step == "seal":
            patch.setattr(compaction.gc, "seal", _raise_after(compaction.gc.seal))
        elif step == "switch":
            patch.setattr(compaction, "finish", lambda *a, **k: (_ for _ in ()).throw(Crash()))
        elif step == "finish-half":
            patch.setattr(compaction.gc, "release", lambda *a, **k: (_ for _ in ()).throw(Crash()))
        elif step == "abort":
            real_seal = compaction.gc.seal

            async def bump_then_seal(*args, **kwargs):  # a concurrent change just before the switch
                await meta.put(job.groups[-1].key, records.encode_group(
                    [records.encode_entry_json(e) for e in job.groups[-1].entries]),
                    partition_key=records.stream_partition(a.stream_id))
                await real_seal(*args, **kwargs)

            patch.setattr(compaction.gc, "seal", bump_then_seal)
            patch.setattr(compaction.gc, "release", lambda *a, **k: (_ for _ in ()).throw(Crash()))
        with pytest.raises(Crash):
            await compaction.compact(meta, objects, storage.reader, job, encode)
        objects.clear_faults()
    assert await read_all(a) == expected  # whatever state the crash left is readable
    await collect_all(meta, objects)
    assert await read_all(a) == expected
    landed = any(e.compacted for g in await index_of(meta, a.stream_id) for e in g)
    assert landed == (step in ("switch", "finish-half"))
    assert stored(objects) == await referenced(meta, [a.stream_id])
    if landed:  # (an upload group shared with the pending slices stays)
        assert stored(objects) & before == before & await referenced(meta, [a.stream_id])
        assert len(await index_of(meta, a.stream_id)) == 1  # the leftover groups are gone
    else:
        assert before <= stored(objects)
        (job,) = await compaction.plan(meta, a.stream_id)  # and it can be compacted later
        await compaction.compact(meta, objects, storage.reader, job, encode)
        await collect_all(meta, objects)
        assert await read_all(a) == expected
        assert stored(objects) == await referenced(meta, [a.stream_id])


async def test_corrupt_compacted_object_is_detected():
    data = encode(7, 100, [(1, memoryview(b"x"))], 1)
    assert [(c, bytes(e)) for c, e in compacted_format.decode_entries(data, 7, 100, 1)] == [(1, b"x")]
    with pytest.raises(CorruptObject, match="compacted object holds stream 7"):
        compacted_format.decode_entries(data, 8, 100, 1)
    table = pa.table(compacted_format.entry_columns([[(1, b"x")]]))
    wrong = compacted_format.encode(table, compacted_format.CompactedHeader(7, 100, 1, 2, 1))  # footer lies
    with pytest.raises(CorruptObject, match="entry counts"):
        compacted_format.decode_entries(wrong, 7, 100, 1)
    with pytest.raises(Exception, match="not a compacted object"):
        compacted_format.read_header(b"garbage" * 10)


async def test_one_compactor_per_stream(meta, objects, storage):
    a, expected = await fill(storage, "l", 16)
    (job,) = await compaction.plan(meta, a.stream_id)
    async with lease(meta, a.stream_id, "someone-else"):
        with pytest.raises(CompactionConflict, match="being compacted by someone-else"):
            async with lease(meta, a.stream_id, "me"):
                pass
    async with lease(meta, a.stream_id, "me"):
        await compaction.compact(meta, objects, storage.reader, job, encode)
    assert await read_all(a) == expected


async def test_work_orphaned_by_a_lost_lease_never_switches(meta, objects, storage):
    a, expected = await fill(storage, "o", 16)
    (job,) = await compaction.plan(meta, a.stream_id)
    with pytest.raises(CompactionConflict, match="lease of job-1 is lost"):
        await compaction.compact(meta, objects, storage.reader, job, encode, lease_owner="job-1")
    assert not any(e.compacted for g in await index_of(meta, a.stream_id) for e in g)
    await collect_all(meta, objects)
    assert stored(objects) == await referenced(meta, [a.stream_id])
    async with lease(meta, a.stream_id, "job-2"):
        await compaction.compact(meta, objects, storage.reader, job, encode, lease_owner="job-2")
    assert await read_all(a) == expected


async def test_size_retention_counts_stream_bytes_of_compacted_ranges(meta, objects, storage):
    from nereus.storage.retention import RetentionPolicy, enforce

    a, expected = await fill(storage, "s", 30)
    (job,) = await compaction.plan(meta, a.stream_id)
    result = await compaction.compact(meta, objects, storage.reader, job, encode)
    tail = await storage.tail(a.stream_id)
    kept = tail.size - job.slices[-1].size  # the bytes after the compacted range
    assert await enforce(storage, a.stream_id, RetentionPolicy(max_bytes=kept + 1)) == result.last + 1
    assert await enforce(storage, a.stream_id, RetentionPolicy(max_bytes=tail.size)) == result.last + 1


async def _compacted_one_group_each(meta, objects, storage, name: str, appends: int):
    """A stream whose idx groups were each compacted into an object of their own."""
    a, expected = await fill(storage, name, appends)
    for job in await compaction.plan(meta, a.stream_id, target_bytes=1):
        await compaction.compact(meta, objects, storage.reader, job, encode)
    groups = await index_of(meta, a.stream_id)
    assert len(groups) >= compaction.MIN_MERGE and all(g[0].compacted and len(g) == 1 for g in groups)
    return a, expected, groups


async def test_small_compacted_objects_merge_into_one_keeping_offsets_bytes_and_sizes(meta, objects, storage):
    a, expected, groups = await _compacted_one_group_each(meta, objects, storage, "g", 43)  # 5 groups
    small = {g[0].object for g in groups}
    assert await compaction.plan(meta, a.stream_id) == []  # no merges unless asked for
    assert await compaction.plan(meta, a.stream_id, merge_below=1) == []  # none small enough
    (merge,) = await compaction.plan(meta, a.stream_id, merge_below=1 << 20)
    assert [g.entries[0].object for g in merge.groups] == [g[0].object for g in groups]
    result = await compaction.compact(meta, objects, storage.reader, merge, encode)
    assert result.generation == 2
    (merged,) = await index_of(meta, a.stream_id)
    assert merged[0].object == result.object and merged[0].base == 0 and merged[0].last == groups[-1][0].last
    assert merged[0].size_before == 0 and merged[0].size == groups[-1][0].size  # stream bytes, as before
    storage.reader.block_cache = type(storage.reader.block_cache)(1 << 20)
    assert await read_all(a) == expected
    await collect_all(meta, objects)
    assert not stored(objects) & small  # the small objects were freed
    assert stored(objects) == await referenced(meta, [a.stream_id])
    assert await read_all(a) == expected
    assert await compaction.plan(meta, a.stream_id, merge_below=1 << 20) == []  # one object: nothing to merge


async def test_fewer_than_min_merge_small_objects_or_a_large_one_between_are_left_alone(meta, objects, storage):
    a, expected = await fill(storage, "f", 27)  # 3 groups
    for job in await compaction.plan(meta, a.stream_id, target_bytes=1):
        await compaction.compact(meta, objects, storage.reader, job, encode)
    assert await compaction.plan(meta, a.stream_id, merge_below=1 << 20) == []
    b, _, groups = await _compacted_one_group_each(meta, objects, storage, "h", 51)  # 6 groups
    limit = groups[2][0].length  # the third object is not small: runs of 2 and 3 around it, too short
    assert await compaction.plan(meta, b.stream_id, merge_below=limit) == []


@pytest.mark.parametrize("step", ["object-put", "switch", "finish-half"])
async def test_a_crash_at_any_step_of_a_merge_leaves_no_change_or_the_whole_change(meta, objects, storage,
                                                                                  monkeypatch, step):
    a, expected, groups = await _compacted_one_group_each(meta, objects, storage, "y", 43)
    (merge,) = await compaction.plan(meta, a.stream_id, merge_below=1 << 20)
    small = {g[0].object for g in groups}
    with monkeypatch.context() as patch:
        if step == "object-put":
            objects.fail_puts(lambda key: key.startswith("compacted/"), exc=Crash)
        elif step == "switch":
            patch.setattr(compaction, "finish", lambda *a, **k: (_ for _ in ()).throw(Crash()))
        else:
            patch.setattr(compaction.gc, "release", lambda *a, **k: (_ for _ in ()).throw(Crash()))
        with pytest.raises(Crash):
            await compaction.compact(meta, objects, storage.reader, merge, encode)
        objects.clear_faults()
    assert await read_all(a) == expected  # leftover small groups and the merged one line up
    if step != "object-put":  # the leftovers are never planned again
        assert await compaction.plan(meta, a.stream_id, merge_below=1 << 20) == []
    await collect_all(meta, objects)
    assert await read_all(a) == expected
    index = await index_of(meta, a.stream_id)
    assert (len(index) == 1) == (step != "object-put")
    assert stored(objects) == await referenced(meta, [a.stream_id])
    assert (not stored(objects) & small) == (step != "object-put")


def merge_by_tables(stream_id: int, first: int, objects, generation: int) -> bytes:
    """A merger as the lakehouse's: the objects' tables concatenated, no entry decoded."""
    import pyarrow.parquet as pq

    tables = [pq.read_table(pa.BufferReader(o)).replace_schema_metadata(None) for o in objects]
    headers = [compacted_format.read_header(o) for o in objects]
    header = compacted_format.CompactedHeader(stream_id, first, sum(h.records for h in headers),
                                              sum(h.entries for h in headers), generation)
    return compacted_format.encode(pa.concat_tables(tables), header)


@pytest.mark.parametrize("merger", ["tables", "cannot", "alters-an-entry"])
async def test_a_merge_by_the_objects_tables_is_checked_against_their_entries(meta, objects, storage, merger):
    import pyarrow.parquet as pq

    a, expected, groups = await _compacted_one_group_each(meta, objects, storage, "m", 43)
    (merge,) = await compaction.plan(meta, a.stream_id, merge_below=1 << 20)
    encoded = []

    def encode_counted(*args):
        encoded.append(args[1])
        return encode(*args)

    def merge_fn(stream_id, first, sources, generation):
        if merger == "cannot":
            return None
        data = merge_by_tables(stream_id, first, sources, generation)
        if merger == "alters-an-entry":  # the same sizes and counts, one byte changed: must never land
            table = pq.read_table(pa.BufferReader(data))
            entries = table.column("_entries").to_pylist()
            entries[-1][0] = bytes([entries[-1][0][0] ^ 1]) + entries[-1][0][1:]
            index = table.schema.get_field_index("_entries")
            table = table.set_column(index, table.schema.field(index), pa.array(entries, table.schema.field(index).type))
            data = compacted_format.encode(table.replace_schema_metadata(None), compacted_format.read_header(data))
        return data

    if merger == "alters-an-entry":
        with pytest.raises(StorageError, match="does not give back its entries"):
            await compaction.compact(meta, objects, storage.reader, merge, encode_counted, merge=merge_fn)
        assert await index_of(meta, a.stream_id) == groups  # no change
        assert await read_all(a) == expected
        return
    result = await compaction.compact(meta, objects, storage.reader, merge, encode_counted, merge=merge_fn)
    assert encoded == ([] if merger == "tables" else [merge.first])  # decoded and encoded only as the fallback
    (merged,) = await index_of(meta, a.stream_id)
    assert merged[0].object == result.object and merged[0].entries == sum(g[0].entries for g in groups)
    storage.reader.block_cache = type(storage.reader.block_cache)(1 << 20)
    assert await read_all(a) == expected
    await collect_all(meta, objects)
    assert stored(objects) == await referenced(meta, [a.stream_id])
    assert await read_all(a) == expected


@pytest.mark.parametrize("finisher", ["caller", "collector"])
async def test_a_compaction_finished_later_is_visible_first_and_finished_by_the_caller_or_the_collector(
        meta, objects, storage, finisher):
    a, expected = await fill(storage, "l", 30)
    (job,) = await compaction.plan(meta, a.stream_id)
    result = await compaction.compact(meta, objects, storage.reader, job, encode, finish_now=False)
    index = await index_of(meta, a.stream_id)
    assert any(g[0].object == result.object for g in index)  # switched: readers meet the compacted object
    assert len([g for g in index if not g[0].compacted and g[-1].last <= result.last]) == len(job.groups) - 1
    assert await read_all(a) == expected
    if finisher == "caller":
        await result.finishing()
    await collect_all(meta, objects)  # the collector finishes from the marker what the caller left
    index = await index_of(meta, a.stream_id)
    assert [g[0].object for g in index if g[-1].last <= result.last] == [result.object]  # leftovers gone
    assert stored(objects) == await referenced(meta, [a.stream_id])
    storage.reader.block_cache = type(storage.reader.block_cache)(1 << 20)
    assert await read_all(a) == expected
