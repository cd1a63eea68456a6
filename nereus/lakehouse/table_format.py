"""The row layout of compacted objects: one row per record, plus the stream's entries.

A compacted object (``storage/compacted_format.py``) is a Parquet file that is at
the same time a data file of the topic's built-in Iceberg table (SBT) and the
stream's storage for brokers. This module turns stored entries into its rows:

    partition      int32      -1 for a non-partitioned topic
    offset         int64      the record's stream offset (Kafka offset; Pulsar entry + batch index)
    publish_time   timestamp  (UTC, microseconds)
    event_time     timestamp
    key            binary
    value          binary
    properties     map<string, string>   Pulsar properties / Kafka headers
    producer_name  string
    _entries, _entry_records             the stream's entries (see compacted_format)

Offsets are exactly the stream's: compaction never renumbers anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

import pyarrow as pa

from ..kafka.codec.records import decode_records
from ..ledger.entry import EntryFlags, EntryFormat, decode_entry
from ..storage import compacted_format
from . import rows as _rows

_TIMESTAMP = pa.timestamp("us", tz="UTC")
RECORD_SCHEMA = pa.schema([
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("publish_time", _TIMESTAMP),
    pa.field("event_time", _TIMESTAMP),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("properties", pa.map_(pa.string(), pa.string())),
    pa.field("producer_name", pa.string()),
])
SCHEMA = pa.schema(list(RECORD_SCHEMA) + [
    pa.field(name, type_) for name, type_ in compacted_format.ENTRY_COLUMNS_TYPE.items()])
RECORD_COLUMNS = tuple(RECORD_SCHEMA.names)


class _Columns:
    """The record columns of a table being built, as Python lists (timestamps in us)."""

    def __init__(self) -> None:
        self.offset: list[int] = []
        self.publish: list[int | None] = []
        self.event: list[int | None] = []
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.properties: list[list | None] = []
        self.producer: list[str | None] = []

    def __len__(self) -> int:
        return len(self.offset)

    def add_kafka(self, base: int, body: memoryview) -> None:
        """The records of a Kafka batch, straight into columns (the hot path of compaction)."""
        header, batch = decode_records(body)
        publish_ms = header.max_timestamp if header.max_timestamp > 0 else header.base_timestamp
        publish = publish_ms * 1000 if publish_ms > 0 else None
        log_time = bool(header.attributes & _rows.LOG_APPEND_TIME)
        n = len(batch)
        self.offset += [base + r.offset_delta for r in batch]
        self.publish += [publish] * n
        self.event += [publish] * n if log_time else [r.timestamp * 1000 if r.timestamp > 0 else None for r in batch]
        self.key += [r.key for r in batch]
        self.value += [r.value for r in batch]
        # a dict first, as ``rows`` does: a repeated header key keeps its last value
        self.properties += [list({k: None if v is None else v.decode("utf-8", "replace") for k, v in r.headers}.items())
                            for r in batch]
        self.producer += [_rows.KAFKA_PRODUCER_NAME] * n

    def add_rows(self, rows) -> None:
        for row in rows:
            self.offset.append(row[2])
            self.publish.append(_micros(row[3]))
            self.event.append(_micros(row[4]))
            self.key.append(row[5])
            self.value.append(row[6])
            self.properties.append(None if row[7] is None else list(row[7].items()))
            self.producer.append(row[8])

    def arrays(self, partition: int) -> list[pa.Array]:
        n = len(self.offset)
        values = [[partition] * n, self.offset, self.publish, self.event, self.key, self.value, self.properties,
                  self.producer]
        return [pa.array(v, type=field.type) for v, field in zip(values, RECORD_SCHEMA)]


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def _micros(value: datetime | None) -> int | None:
    return None if value is None else (value - _EPOCH) // _MICROSECOND


def build_table(topic: str, partition: int, first: int,
                entries: Sequence[tuple[int, bytes | memoryview]]) -> pa.Table:
    """The rows of ``entries`` (the first at offset ``first``), each entry on its first record's row.

    Entries without records (markers) ride with the row before them, or with the
    first row. A range without any record gets one row that only carries entries
    (offset = ``first``, every record column null). Rows equal ``rows.entry_rows``'.
    """
    columns = _Columns()
    carried: dict[int, list[tuple[int, bytes | memoryview]]] = {}  # row index -> entries it carries
    waiting: list[tuple[int, bytes | memoryview]] = []  # entries seen before the first row
    base = first
    for count, data in entries:
        row = len(columns)
        header, body = decode_entry(data)
        if header.flags & EntryFlags.CONTROL:
            pass  # markers: offsets without records
        elif header.format == EntryFormat.KAFKA:
            columns.add_kafka(base, body)
        else:
            columns.add_rows(_rows.entry_rows(topic, partition, base, data))
        if len(columns) > row:
            carried[row] = waiting + [(count, data)]
            waiting = []
        elif len(columns):
            carried.setdefault(row - 1, []).append((count, data))
        else:
            waiting.append((count, data))
        base += count
    if waiting:  # no record at all in the range
        columns.add_rows([(topic, partition, first, None, None, None, None, None, None)])
        carried[0] = waiting
    entry_columns = compacted_format.entry_columns([carried.get(i, ()) for i in range(len(columns))])
    return pa.Table.from_arrays(columns.arrays(partition) + list(entry_columns.values()), schema=SCHEMA)
