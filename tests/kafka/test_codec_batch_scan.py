"""The side-by-side record scan reads what decode_records reads; the compaction key
extraction that uses it gives what the per-entry path gives, malformed batches included."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nereus.codec.kafka.batch import GZIP, HEADER_SIZE, LZ4, NO_COMPRESSION, SNAPPY, ZSTD, InvalidBatch, parse_header
from nereus.codec.kafka.batch_scan import scan
from nereus.codec.kafka.inflate import decompress
from nereus.codec.kafka.records import Record, _put_varint, build_batch, decode_records
from nereus.ledger.entry import EntryFormat, EntryHeader, encode_entry
from nereus.storage.api import FetchedEntry
from nereus.topics.key_compaction import _keys_table, entries_keys, entry_keys

records = st.lists(st.tuples(
    st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.binary(max_size=300)),
    st.integers(-(2**61), 2**61),  # timestamps: deltas of any int64 size and sign
    st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=8))), max_size=2)),
    min_size=1, max_size=12)


def batch_of(rows, codec: int = NO_COMPRESSION) -> bytes:
    base_ts = min(ts for _, _, ts, _ in rows)
    recs = [Record(i, ts, key, value, headers) for i, (key, value, ts, headers) in enumerate(rows)]
    batch = build_batch(recs, codec=codec)
    assert decode_records(batch)[0].base_timestamp == base_ts
    return batch


def scanned(batches: list[bytes]) -> list[tuple]:
    headers = [parse_header(b) for b in batches]
    sections = [decompress(h.compression, memoryview(b)[HEADER_SIZE:h.length]) for h, b in zip(headers, batches)]
    found = scan(sections, [h.record_count for h in headers])
    offsets, data, has_key = found.key_array()
    raw = data.tobytes()
    rows = [(int(found.batch[i]), int(found.offset_delta[i]), headers[found.batch[i]].base_timestamp
             + int(found.timestamp_delta[i]), raw[offsets[i]:offsets[i + 1]] if has_key[i] else None,
             bool(found.value_null[i])) for i in range(len(found.batch))]
    return sorted(rows)


def reference(batches: list[bytes]) -> list[tuple]:
    return sorted((n, r.offset_delta, r.timestamp, r.key, r.value is None)
                  for n, b in enumerate(batches) for r in decode_records(b)[1])


@settings(max_examples=150, deadline=None)
@given(st.lists(records, max_size=8))
def test_scan_reads_what_decode_records_reads(groups):
    batches = [batch_of(rows) for rows in groups]
    assert scanned(batches) == reference(batches)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_compressed_batches(codec):
    rows = [(b"k%d" % (i % 7), None if i % 5 == 0 else b"v" * i, 1000 + i, []) for i in range(50)]
    batches = [batch_of(rows, codec), batch_of(rows[:3], codec)]
    assert scanned(batches) == reference(batches)


def stored(base: int, batch: bytes, count: int) -> FetchedEntry:
    data = b"".join(bytes(x) for x in encode_entry(EntryHeader(EntryFormat.KAFKA, count), batch))
    return FetchedEntry(base, count, data)


def per_entry(entries: list[FetchedEntry]):
    cols: tuple[list, ...] = ([], [], [], [], [], [])
    for e in entries:
        offsets, keys, tombstones, stamps = entry_keys(e.base_offset, memoryview(e.data))
        for column, values in zip(cols, (offsets, keys, tombstones, stamps, [e.base_offset] * len(offsets),
                                         [e.record_count] * len(offsets))):
            column += values
    return _keys_table(*cols).sort_by("offset")


@settings(max_examples=60, deadline=None)
@given(st.lists(records, min_size=1, max_size=6))
def test_entries_keys_of_kafka_entries_match_the_per_entry_path(groups):
    entries, base = [], 0
    for rows in groups:
        entries.append(stored(base, batch_of(rows), len(rows)))
        base += len(rows)
    assert entries_keys(entries).sort_by("offset").equals(per_entry(entries))


def _record(body: bytes) -> bytes:
    out = bytearray()
    _put_varint(out, len(body))
    return bytes(out) + body


def _raw_batch(record_bytes: bytes, count: int) -> bytes:
    """A batch whose records section is ``record_bytes`` (header fields from a real batch)."""
    head = bytearray(build_batch([Record(0, 5, b"k", b"v")])[:HEADER_SIZE])
    head[8:12] = (HEADER_SIZE - 12 + len(record_bytes)).to_bytes(4, "big")
    head[57:61] = count.to_bytes(4, "big")
    return bytes(head) + record_bytes


@pytest.mark.parametrize("records_section, count", [
    (_record(b"\x00\x00\x00\x08key"), 1),  # the key's length (4) runs past the record
    (_record(b"\x00\x00\x00"), 1),  # the record ends before its key length
    (b"\x40", 1),  # a record length past the end of the batch
    (_record(b"\x00\x00\x00\x02k\x01"), 2),  # fewer records than the header says
    (_record(b"\x00\x00\x00\x05k\x01"), 1),  # a key length of -3
])
def test_malformed_records_are_refused_by_the_scan(records_section, count):
    with pytest.raises(InvalidBatch):
        scan([records_section], [count])


def test_a_batch_the_scan_refuses_is_read_by_the_per_entry_path():
    good = stored(0, batch_of([(b"a", b"1", 7, []), (b"b", None, 8, [])]), 2)
    # the key overruns its record but not the batch: the lenient per-entry decoder reads it
    lenient = _record(b"\x00\x00\x00\x04a") + _record(b"\x00\x00\x02\x02c\x02d\x00")
    odd = stored(2, _raw_batch(lenient, 2), 2)
    assert [r.key for r in decode_records(_raw_batch(lenient, 2))[1]] == [b"a\x10", b"c"]
    assert entries_keys([good, odd]).sort_by("offset").equals(per_entry([good, odd]))
    with pytest.raises(InvalidBatch):
        entries_keys([good, stored(4, _raw_batch(b"\x40", 1), 1)])
