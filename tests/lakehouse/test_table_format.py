"""Compacted rows equal the data source's rows (``rows.entry_rows``), entry for entry."""

from __future__ import annotations

from nereus.kafka.codec.records import Record, build_batch
from nereus.lakehouse import rows, table_format
from nereus.ledger.entry import EntryFlags, EntryFormat, EntryHeader, encode_entry
from nereus.storage import compacted_format


def _kafka_entry(records) -> bytes:
    body = build_batch(records)
    return b"".join(bytes(c) for c in encode_entry(EntryHeader(EntryFormat.KAFKA, len(records)), body))


def _marker() -> bytes:
    header = EntryHeader(EntryFormat.KAFKA, 1, flags=EntryFlags.CONTROL)
    return b"".join(bytes(c) for c in encode_entry(header, build_batch([Record(0, 5, None, b"", [])])))


def test_rows_and_entries_match_the_data_source():
    entries = [
        (3, _kafka_entry([Record(0, 1_700_000_000_000, b"k", b"v0", [("a", b"1"), ("a", b"2"), ("n", None)]),
                          Record(1, 0, None, None, []),
                          Record(2, 1_700_000_000_002, b"\xff", b"\x00\xff", [("h", b"\xc3\xa9")])])),
        (1, _marker()),
        (2, _kafka_entry([Record(0, 1_700_000_000_100, b"x", b"y", []), Record(1, 1_700_000_000_101, b"z", b"w", [])])),
    ]
    table = table_format.build_table("t", 3, 10, entries)
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
    table = table_format.build_table("t", -1, 0, [(1, _marker()), (1, _marker())])
    assert table.num_rows == 1 and table.column("value").to_pylist() == [None]
    assert table.column("_entry_records").to_pylist() == [[1, 1]]
