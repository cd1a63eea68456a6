"""Byte layout of a compacted object: one Parquet file per stream range.

Compaction rewrites a run of committed WAL slices of one stream as one immutable
Parquet file that serves two readers from the same bytes:

* stream readers (brokers) read only two columns, ``_entries`` (list<binary>) and
  ``_entry_records`` (list<int64>): concatenated in row order they are the stream's
  entries, byte for byte, with their record counts, exactly as they were appended;
* table readers (Spark, pyiceberg, ...) read the record columns the caller put
  beside them (one row per record, see ``nereus.lakehouse.compaction``).

Each entry sits in the row of its first record (entries without records, such as
markers, ride along with the row before them, or the first row), so the row count
is the record count and no row is invented. The footer's key-value metadata names
the stream and the offsets the file covers, which a reader checks before serving.
The storage layer knows nothing of the record columns: it only reads and checks
the entry columns.
"""

from __future__ import annotations

import io
import json
from array import array
from collections.abc import Sequence
from itertools import accumulate
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import CorruptObject

ENTRIES_COLUMN = "_entries"
ENTRY_RECORDS_COLUMN = "_entry_records"
META_KEY = b"nereus.compacted"
# Parquet reports corrupt files as ArrowException or, from its thrift and
# decompression layers, as plain OSError / ValueError.
_UNREADABLE = (pa.ArrowException, OSError, ValueError)
ENTRY_COLUMNS_TYPE = {ENTRIES_COLUMN: pa.list_(pa.binary()), ENTRY_RECORDS_COLUMN: pa.list_(pa.int64())}


@dataclass(frozen=True, slots=True)
class CompactedHeader:
    """What the footer says a compacted object holds."""

    stream_id: int
    first: int  # offset of the first record
    records: int  # record count (offsets first .. first + records - 1)
    entries: int
    generation: int


def entry_columns(entries_per_row: Sequence[Sequence[tuple[int, bytes | memoryview]]]) -> dict[str, pa.Array]:
    """The two entry columns for rows that carry ``[(record_count, entry), ...]`` each."""
    offsets = [0]
    blobs: list[bytes | memoryview] = []
    counts: list[int] = []
    for row in entries_per_row:  # most rows carry nothing: one int append each
        for count, entry in row:
            counts.append(count)
            blobs.append(entry)
        offsets.append(len(counts))
    offsets_array = pa.array(offsets, pa.int32())
    return {
        ENTRIES_COLUMN: pa.ListArray.from_arrays(offsets_array, binary_array(blobs)),
        ENTRY_RECORDS_COLUMN: pa.ListArray.from_arrays(offsets_array, pa.array(counts, pa.int64())),
    }


def binary_array(blobs: Sequence[bytes | memoryview]) -> pa.BinaryArray:
    """``blobs`` as one Arrow binary array: one join and one offsets buffer (pyarrow would take
    memoryviews element by element, and copy each bytes object on its own)."""
    lengths = array("i", [0])
    lengths.extend(map(len, blobs))
    offsets = array("i", accumulate(lengths))
    return pa.BinaryArray.from_buffers(pa.binary(), len(blobs), [None, pa.py_buffer(offsets),
                                                                 pa.py_buffer(b"".join(blobs))])


def encode(table: pa.Table, header: CompactedHeader, *, row_group_rows: int = 64 * 1024) -> bytes:
    """A Parquet file of ``table`` (which must include the entry columns) with ``header``."""
    for name in (ENTRIES_COLUMN, ENTRY_RECORDS_COLUMN):
        if name not in table.column_names:
            raise ValueError(f"a compacted object needs the {name} column")
    meta = dict(table.schema.metadata or {})
    meta[META_KEY] = json.dumps({"stream": header.stream_id, "first": header.first, "records": header.records,
                                 "entries": header.entries, "generation": header.generation}).encode()
    # The entries are stored as they were appended (producers compress their batches
    # already); only the record columns are compressed.
    compression = {path: "none" if path.startswith("_entries.") else "zstd" for path in _leaf_paths(table.schema)}
    sink = io.BytesIO()
    pq.write_table(table.replace_schema_metadata(meta), sink, compression=compression, row_group_size=row_group_rows)
    return sink.getvalue()


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """Parquet column paths of ``schema``'s leaves (how per-column options are named)."""
    out: list[str] = []

    def walk(prefix: str, type_: pa.DataType) -> None:
        if pa.types.is_map(type_):
            walk(f"{prefix}.key_value.key", type_.key_type)
            walk(f"{prefix}.key_value.value", type_.item_type)
        elif pa.types.is_list(type_) or pa.types.is_large_list(type_):
            walk(f"{prefix}.list.element", type_.value_type)
        elif pa.types.is_struct(type_):
            for field in type_:
                walk(f"{prefix}.{field.name}", field.type)
        else:
            out.append(prefix)

    for field in schema:
        walk(field.name, field.type)
    return out


def read_header(data: bytes | memoryview) -> CompactedHeader:
    try:
        meta = pq.ParquetFile(pa.BufferReader(data)).schema_arrow.metadata or {}
        value = json.loads(meta[META_KEY])
        fields = [value[name] for name in ("stream", "first", "records", "entries", "generation")]
    except (*_UNREADABLE, KeyError, TypeError) as exc:
        raise CorruptObject(f"not a compacted object: {exc}") from None
    if not all(type(f) is int and f >= 0 for f in fields):
        raise CorruptObject(f"compacted object footer has bad values: {value}")
    return CompactedHeader(*fields)


def entry_arrays(data: bytes | memoryview, stream_id: int, first: int,
                 records: int) -> tuple[pa.BinaryArray, pa.Int64Array]:
    """The entries of a compacted object and their record counts, as two flat Arrow arrays,
    after checking it.

    Raises CorruptObject if the file is unreadable, belongs to another stream or
    range, or its entries do not add up to the records its index entry promises.
    """
    header = read_header(data)
    if (header.stream_id, header.first, header.records) != (stream_id, first, records):
        raise CorruptObject(f"compacted object holds stream {header.stream_id} [{header.first}, +{header.records}),"
                            f" expected stream {stream_id} [{first}, +{records})")
    try:
        table = pq.read_table(pa.BufferReader(data), columns=[ENTRIES_COLUMN, ENTRY_RECORDS_COLUMN])
        if table.schema != pa.schema(ENTRY_COLUMNS_TYPE.items()).remove_metadata():
            raise CorruptObject(f"compacted object has entry columns of the wrong types: {table.schema}")
        blobs = table.column(ENTRIES_COLUMN).combine_chunks().flatten()
        counts = table.column(ENTRY_RECORDS_COLUMN).combine_chunks().flatten()
        valid = (counts.null_count == 0 and blobs.null_count == 0 and len(counts) == len(blobs) == header.entries
                 and (not len(counts) or (pc.min(counts).as_py() >= 0 and pc.sum(counts).as_py() == records)))
    except _UNREADABLE as exc:
        raise CorruptObject(f"unreadable compacted object: {exc}") from None
    if not valid:
        raise CorruptObject("compacted object: entry counts do not match its footer")
    return blobs, counts


def decode_entries(data: bytes | memoryview, stream_id: int, first: int,
                   records: int) -> list[tuple[int, memoryview]]:
    """Entries ``[(record_count, bytes), ...]`` of a compacted object, after checking it (``entry_arrays``)."""
    blobs, counts = entry_arrays(data, stream_id, first, records)
    # as_buffer() is zero-copy: every entry is a view of the column's one data buffer
    # (cast to unsigned bytes: views compare element by element, and Arrow's are signed).
    return [(count, memoryview(blob.as_buffer()).cast("B")) for count, blob in zip(counts.to_pylist(), blobs)]


def holds_entries(data: bytes | memoryview, stream_id: int, first: int,
                  entries: Sequence[tuple[int, bytes | memoryview]]) -> bool:
    """Whether the compacted object ``data`` gives back exactly ``entries``, byte for byte (one
    comparison of Arrow arrays, not one per entry); raises CorruptObject as ``entry_arrays``."""
    blobs, counts = entry_arrays(data, stream_id, first, sum(c for c, _ in entries))
    return (counts.equals(pa.array([c for c, _ in entries], pa.int64()))
            and blobs.equals(binary_array([e for _, e in entries])))


def merged_entries(data: bytes | memoryview, stream_id: int, first: int,
                   sources: Sequence[tuple[bytes | memoryview, int, int]]) -> int | None:
    """The entry count of the compacted object ``data`` if it gives back exactly the entries of
    the compacted objects ``sources`` (``(bytes, first, records)`` each, adjacent, in order),
    else None; raises CorruptObject as ``entry_arrays`` (for any of them)."""
    parts = [entry_arrays(source, stream_id, base, records) for source, base, records in sources]
    blobs, counts = entry_arrays(data, stream_id, first, sum(records for _, _, records in sources))
    if (blobs.equals(pa.concat_arrays([b for b, _ in parts]))
            and counts.equals(pa.concat_arrays([c for _, c in parts]))):
        return len(blobs)
    return None
