"""Compacted rows equal the data source's rows (``rows.entry_rows``), entry for entry:
both come from one mapping of records to values (``record_values``)."""

from __future__ import annotations

import struct
from datetime import datetime, timezone

import pyarrow as pa
import pytest

from nereus.codec.kafka.records import Record, build_batch
from nereus.lakehouse import rows, table_format
from nereus.ledger.entry import EntryFlags, EntryFormat, EntryHeader, encode_entry
from nereus.codec.pulsar import PulsarApi_pb2 as pb
from nereus.codec.pulsar import batch as pulsar_batch
from nereus.storage import compacted_format


def _kafka_entry(records) -> bytes:
    body = build_batch(records)
    return b"".join(bytes(c) for c in encode_entry(EntryHeader(EntryFormat.KAFKA, len(records)), body))


def _marker() -> bytes:
    header = EntryHeader(EntryFormat.KAFKA, 1, flags=EntryFlags.CONTROL)
    return b"".join(bytes(c) for c in encode_entry(header, build_batch([Record(0, 5, None, b"", [])])))


def _pulsar_entry(meta: pb.MessageMetadata, payload: bytes, count: int) -> bytes:
    raw = meta.SerializeToString()
    body = struct.pack(">I", len(raw)) + raw + payload
    return b"".join(bytes(c) for c in encode_entry(EntryHeader(EntryFormat.PULSAR, count), body))


def _pulsar_batch() -> bytes:
    messages = [(b"b0", pb.SingleMessageMetadata(partition_key="pk", event_time=1_700_000_000_007,
                                                  properties=[pb.KeyValue(key="a", value="1")])),
                (b"", pb.SingleMessageMetadata(null_value=True))]
    parts, count = pulsar_batch.build_batch(messages)
    meta = pb.MessageMetadata(producer_name="batcher", sequence_id=1, publish_time=1_700_000_001_000,
                              num_messages_in_batch=count)
    return _pulsar_entry(meta, b"".join(bytes(p) for p in parts), count)


def _pulsar_single() -> bytes:
    meta = pb.MessageMetadata(producer_name="single", sequence_id=0, publish_time=1_700_000_002_000,
                              properties=[pb.KeyValue(key="k", value="v")])
    return _pulsar_entry(meta, b"one", 1)


def _time(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def test_pulsar_and_kafka_records_map_to_the_same_values_in_rows_and_compacted_objects():
    entries = [(1, _pulsar_single()), (2, _pulsar_batch()),
               (2, _kafka_entry([Record(0, 1_700_000_000_100, b"x", b"y", [("h", b"1"), ("h", b"2")]),
                                 Record(1, 0, None, None, [])]))]
    expected = [
        ("t", 0, 5, _time(1_700_000_002_000), None, None, b"one", {"k": "v"}, "single"),
        ("t", 0, 6, _time(1_700_000_001_000), _time(1_700_000_000_007), b"pk", b"b0", {"a": "1"}, "batcher"),
        ("t", 0, 7, _time(1_700_000_001_000), None, None, None, {}, "batcher"),
        ("t", 0, 8, _time(1_700_000_000_100), _time(1_700_000_000_100), b"x", b"y", {"h": "2"}, "kafka"),
        ("t", 0, 9, _time(1_700_000_000_100), None, None, None, {}, "kafka"),
    ]
    got_rows, base = [], 5
    for count, data in entries:
        got_rows += list(rows.entry_rows("t", 0, base, data))
        base += count
    assert got_rows == expected
    table = table_format.build_table(0, 5, entries)
    got = [(r["partition"], r["offset"], r["publish_time"], r["event_time"], r["key"], r["value"],
            dict(r["properties"]), r["producer_name"])
           for r in table.select(list(table_format.RECORD_COLUMNS)).to_pylist()]
    assert got == [row[1:] for row in expected]


def test_rows_and_entries_match_the_data_source():
    entries = [
        (3, _kafka_entry([Record(0, 1_700_000_000_000, b"k", b"v0", [("a", b"1"), ("a", b"2"), ("n", None)]),
                          Record(1, 0, None, None, []),
                          Record(2, 1_700_000_000_002, b"\xff", b"\x00\xff", [("h", b"\xc3\xa9")])])),
        (1, _marker()),
        (2, _kafka_entry([Record(0, 1_700_000_000_100, b"x", b"y", []), Record(1, 1_700_000_000_101, b"z", b"w", [])])),
    ]
    table = table_format.build_table(3, 10, entries)
    expected = []
    base = 10
    for count, data in entries:
        expected += list(rows.entry_rows("t", 3, base, data))
        base += count
    assert table.num_rows == len(expected) == 5
    got = table.select(list(table_format.RECORD_COLUMNS)).to_pylist()
    for row, want in zip(got, expected):
        assert (row["partition"], row["offset"], row["publish_time"], row["event_time"], row["key"], row["value"],
                dict(row["properties"]) if row["properties"] is not None else None, row["producer_name"]) == want[1:]
    data = compacted_format.encode(table, compacted_format.CompactedHeader(1, 10, 6, 3, 1))
    back = compacted_format.decode_entries(data, 1, 10, 6)
    assert [(c, bytes(e)) for c, e in back] == [(c, bytes(e)) for c, e in entries]  # the marker rides along


def test_a_range_without_records_keeps_its_entries_on_one_row():
    table = table_format.build_table(-1, 0, [(1, _marker()), (1, _marker())])
    assert table.num_rows == 1 and table.column("value").to_pylist() == [None]
    assert table.column("_entry_records").to_pylist() == [[1, 1]]


def _ranges_built(ranges, first=10):
    tables, base = [], first
    for entries in ranges:
        tables.append(table_format.build_table(2, base, entries))
        base += sum(c for c, _ in entries)
    return tables


@pytest.mark.parametrize("layout", ["records", "markers-first", "markers-between", "markers-last", "markers-only"])
def test_merged_tables_equal_the_table_built_from_all_their_entries(layout):
    records = [[(1, _pulsar_single()), (2, _pulsar_batch())],
               [(2, _kafka_entry([Record(0, 1_700_000_000_100, b"x", b"y", []), Record(1, 0, None, None, [])]))],
               [(1, _pulsar_single())]]
    markers = [(1, _marker()), (1, _marker())]
    ranges = {"records": records, "markers-first": [markers] + records,
              "markers-between": [records[0], markers, records[1], markers, records[2]],
              "markers-last": records + [markers], "markers-only": [markers, markers[:1]]}[layout]
    merged = table_format.merge_tables(_ranges_built(ranges))
    whole = table_format.build_table(2, 10, [e for r in ranges for e in r])
    assert merged.to_pylist() == whole.to_pylist()
    assert merged.schema.equals(whole.schema)


def test_tables_of_other_columns_are_not_merged():
    plain = table_format.build_table(2, 10, [(1, _pulsar_single())])
    wider = plain.append_column("extra", pa.array([1], pa.int64()))
    assert table_format.merge_tables([plain, wider]) is None
