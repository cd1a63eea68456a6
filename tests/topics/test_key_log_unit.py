"""The key log's pieces: keys handed over by the Kafka produce path equal the keys the
build would scan, log entries round-trip, and a recorder writes one entry per contiguous
run of what it saw commit, readable, trimmable and deleted with its topic."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nereus.codec.kafka.records import Record, build_batch, decode_records
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.ledger.entry import EntryFormat, EntryHeader, encode_entry
from nereus.storage import StorageOptions, StreamStorage, WalOptions, key_view
from nereus.storage.api import FetchedEntry
from nereus.storage.errors import StorageError, StreamNotFound
from nereus.topics import key_log
from nereus.topics.key_compaction import KeyCompactor, entries_keys

keyed_records = st.lists(st.tuples(st.binary(min_size=0, max_size=20), st.one_of(st.none(), st.binary(max_size=50)),
                                   st.integers(0, 2**50)), min_size=1, max_size=10)


def kafka_entry(base: int, rows) -> tuple[FetchedEntry, key_log.GivenKeys]:
    batch = build_batch([Record(i, ts, key, value) for i, (key, value, ts) in enumerate(rows)])
    data = b"".join(bytes(x) for x in encode_entry(EntryHeader(EntryFormat.KAFKA, len(rows)), batch))
    decoded = decode_records(batch)[1]  # what the produce path hands over
    keys = ([r.offset_delta for r in decoded], [r.key for r in decoded], [r.value is None for r in decoded],
            [r.timestamp for r in decoded])
    return FetchedEntry(base, len(rows), data), keys


def entries_of(groups) -> list[tuple[FetchedEntry, key_log.GivenKeys]]:
    out, base = [], 0
    for rows in groups:
        out.append(kafka_entry(base, rows))
        base += len(rows)
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(keyed_records, min_size=1, max_size=6))
def test_keys_handed_over_equal_the_keys_scanned(groups):
    entries = entries_of(groups)
    handed = key_log.given_table(entries).sort_by("offset")
    scanned = entries_keys([e for e, _ in entries]).sort_by("offset")
    assert handed.equals(scanned.cast(handed.schema))


def test_log_entries_round_trip_and_garbage_is_refused():
    entries = entries_of([[(b"a", b"1", 5), (b"b", None, 6)], [(b"a", b"2", 7)]])
    table = key_log.given_table(entries)
    rec = key_log.decode(key_log.encode(42, 0, 3, table, 3), position=9)
    assert (rec.stream_id, rec.lo, rec.hi, rec.records, rec.position) == (42, 0, 3, 3, 9)
    assert rec.keys.equals(table)
    for junk in (b"", b"not arrow", key_log.encode(42, 0, 3, table, 3)[:-20]):
        with pytest.raises(StorageError):
            key_log.decode(junk, 0)
    wrong = pa.table({"x": [1]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, wrong.schema.with_metadata({b"stream": b"1", b"lo": b"0", b"hi": b"1",
                                                             b"records": b"1"})) as w:
        w.write_table(wrong)
    with pytest.raises(StorageError):
        key_log.decode(sink.getvalue(), 0)


def test_contiguous_runs_cut_at_gaps():
    e = [FetchedEntry(b, n, b"") for b, n in ((0, 2), (2, 1), (5, 1), (6, 3), (10, 1))]
    assert [[x.base_offset for x in run] for run in key_log.contiguous_runs(e)] == [[0, 2], [5, 6], [10]]


@pytest.fixture
async def storage():
    engine = open_engine(None, shards=2)
    meta = engine.client(namespace="default")
    store = StreamStorage(meta, open_object_store("memory://"), node_id="node-a",
                          options=StorageOptions(wal=WalOptions(flush_interval=0.002)))
    yield store
    await store.close()
    await store.objects.close()
    await meta.close()
    await engine.close()


async def test_a_recorder_writes_runs_that_a_build_reads_trims_and_deletes(storage):
    topic = await storage.open_stream("persistent://public/default/kl", create=True)
    recorder = key_log.KeyRecorder(storage, topic.stream_id, entries_keys)
    entries = entries_of([[(b"a", b"1", 5)], [(b"b", b"2", 6), (b"a", None, 7)], [(b"c", b"3", 8)],
                          [(b"b", b"4", 9)]])
    recorder.committed(0, 1, entries[0][0].data, entries[0][1])  # not enabled yet: ignored
    recorder.enable()
    # Offsets 1-2 seen with their keys handed over, 3-4 scanned, then a gap (5 never seen here).
    recorder.committed(1, 2, entries[1][0].data, entries[1][1])
    recorder.committed(3, 1, entries[2][0].data)
    recorder.committed(4, 1, entries[3][0].data)
    recorder.committed(6, 1, entries[0][0].data)
    await recorder.drain()
    found = await key_log.read(storage, topic.stream_id, 0, 100)
    assert [(r.lo, r.hi, r.records) for r in found] == [(1, 5, 4), (6, 7, 1)]
    rows = found[0].keys.sort_by("offset")  # b at 1 is replaced within the run: only its latest row
    assert rows.column("offset").to_pylist() == [2, 3, 4]
    assert rows.column("key").to_pylist() == [b"a", b"c", b"b"]
    assert rows.column("tombstone").to_pylist() == [True, False, False]
    assert rows.column("entry_base").to_pylist() == [1, 3, 4]
    assert [(r.lo, r.hi) for r in await key_log.read(storage, topic.stream_id, 5, 6)] == []
    await key_log.trim_below(storage, topic.stream_id, 5, found)
    assert [(r.lo, r.hi) for r in await key_log.read(storage, topic.stream_id, 0, 100)] == [(6, 7)]
    await recorder.close()
    await key_log.delete_topic_stream(storage, "persistent://public/default/kl")
    with pytest.raises(StreamNotFound):
        await storage.stream_id(key_log.log_name(topic.stream_id))
    assert await key_log.read(storage, topic.stream_id, 0, 100) == []


async def test_a_log_no_build_trims_keeps_only_its_latest_entries(storage, monkeypatch):
    monkeypatch.setattr(key_log, "MAX_LOG_ENTRIES", 2)
    topic = await storage.open_stream("persistent://public/default/kl-bound", create=True)
    recorder = key_log.KeyRecorder(storage, topic.stream_id, entries_keys)
    recorder.enable()
    entry, keys = entries_of([[(b"a", b"1", 5)]])[0]
    for base in (0, 2, 4, 6, 8):  # each a run of its own
        recorder.committed(base, 1, entry.data, keys)
        await recorder.drain()
    assert [(r.lo, r.hi) for r in await key_log.read(storage, topic.stream_id, 0, 100)] == [(6, 7), (8, 9)]
    await recorder.close()


async def test_a_key_log_that_disagrees_with_the_topic_does_not_stop_compaction(storage):
    topic = await storage.open_stream("persistent://public/default/kl-wrong", create=True)
    entries = entries_of([[(b"a", b"1", 5), (b"b", b"2", 6)], [(b"a", b"3", 7)]])
    for entry, _ in entries:
        await topic.append(entry.data, entry.record_count)
    wrong = key_log.given_table([(FetchedEntry(e.base_offset + 1, e.record_count, e.data), k) for e, k in entries])
    log_stream = await storage.open_stream(key_log.log_name(topic.stream_id), create=True)
    await log_stream.append(key_log.encode(topic.stream_id, 0, 3, wrong, 3), 1)  # entries at 1 and 3: none
    result = await KeyCompactor(storage, owner="test").compact("persistent://public/default/kl-wrong")
    assert (result.horizon, result.records) == (3, 2)
    _, view = await key_view.load(storage.meta, storage.objects, topic.stream_id)
    assert [(v.entry.base_offset, v.keep) for v in view.entries] == [(0, (1,)), (2, (0,))]


async def recorder_with_a_commit(storage, name: str):
    """(topic stream, its recorder holding one committed entry not yet written, that entry and keys)."""
    topic = await storage.open_stream(name, create=True)
    recorder = key_log.KeyRecorder(storage, topic.stream_id, entries_keys)
    recorder.enable()
    entry, keys = entries_of([[(b"a", b"1", 5)]])[0]
    recorder.committed(0, 1, entry.data, keys)
    return topic, recorder, entry, keys


async def test_a_flush_after_its_topic_was_deleted_leaves_no_key_log(storage):
    name = "persistent://public/default/kl-deleted"
    topic, recorder, entry, keys = await recorder_with_a_commit(storage, name)
    # The deletion (here or on another broker) beats the owner's last flush: the flush
    # must not leave a log behind for a stream id nobody uses any more.
    await key_log.delete_topic_stream(storage, name)
    await recorder.drain()
    assert not await storage.exists(topic.stream_id)
    with pytest.raises(StreamNotFound):
        await storage.stream_id(key_log.log_name(topic.stream_id))
    recorder.committed(1, 1, entry.data, keys)  # a late commit is not recorded either
    await recorder.drain()
    with pytest.raises(StreamNotFound):
        await storage.stream_id(key_log.log_name(topic.stream_id))
    await recorder.close()


async def test_a_log_created_just_before_the_deletion_is_deleted_by_the_deleter(storage, monkeypatch):
    name = "persistent://public/default/kl-race"
    topic, recorder, _, _ = await recorder_with_a_commit(storage, name)
    exists = storage.exists

    async def deleted_right_after_the_check(stream_id):
        found = await exists(stream_id)
        await key_log.delete_topic_stream(storage, name)  # the topic, then the log the recorder just created
        return found

    monkeypatch.setattr(storage, "exists", deleted_right_after_the_check)
    await recorder.drain()
    monkeypatch.setattr(storage, "exists", exists)
    with pytest.raises(StreamNotFound):
        await storage.stream_id(key_log.log_name(topic.stream_id))
    await recorder.close()
