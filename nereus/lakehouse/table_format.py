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

import pyarrow as pa
import pyarrow.compute as pc

from ..storage import compacted_format
from ..transactions.stream_index import TxnView
from .record_values import RecordColumns, schema_version

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
ENTRY_COLUMNS = tuple(compacted_format.ENTRY_COLUMNS_TYPE)


def iceberg_data_file(io, table_metadata, path: str):
    """The Iceberg data file of the compacted object at ``path``: statistics of the record columns only.

    The object's entry columns are not in the table schema; the file is registered as
    it is (zero-copy), so its statistics are computed over the schema's columns alone.
    """
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (_check_pyarrow_schema_compatible, compute_statistics_plan,
                                      data_file_statistics_from_parquet_metadata, parquet_path_to_id_mapping)
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    input_file = io.new_input(path)
    with input_file.open() as stream:
        metadata = pq.read_metadata(stream)
    schema = table_metadata.schema()
    arrow_schema = metadata.schema.to_arrow_schema()
    records = pa.schema([arrow_schema.field(name) for name in arrow_schema.names if name not in ENTRY_COLUMNS])
    _check_pyarrow_schema_compatible(schema, records, format_version=table_metadata.format_version)
    mapping = parquet_path_to_id_mapping(schema)
    statistics = data_file_statistics_from_parquet_metadata(
        _ColumnsIn(metadata, mapping), compute_statistics_plan(schema, table_metadata.properties), mapping)
    return DataFile.from_args(
        content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=statistics.partition(table_metadata.spec(), schema), file_size_in_bytes=len(input_file),
        sort_order_id=None, spec_id=table_metadata.default_spec_id, equality_ids=None, key_metadata=None,
        **statistics.to_serialized_dict())


def holds_records(io, path: str) -> bool:
    """False for a compacted object whose only row carries entries and no record (a range of
    markers and aborted transactional records): a table lists no such file.

    Every record has a producer name (Kafka batches: ``kafka``), the carrier row none.
    """
    import pyarrow.parquet as pq

    with io.new_input(path).open() as stream:
        metadata = pq.read_metadata(stream)
    if metadata.num_rows != 1 or metadata.num_row_groups != 1:
        return metadata.num_rows > 0
    group = metadata.row_group(0)
    for i in range(group.num_columns):
        column = group.column(i)
        if column.path_in_schema == "producer_name":
            stats = column.statistics
            return stats is None or not stats.has_null_count or stats.null_count == 0
    return True


class _ColumnsIn:
    """Parquet file metadata as if the file held only the columns in ``mapping`` (paths to field ids)."""

    def __init__(self, metadata, mapping: dict[str, int]) -> None:
        self._metadata = metadata
        self.num_rows = metadata.num_rows
        self.num_row_groups = metadata.num_row_groups
        first = metadata.row_group(0) if metadata.num_row_groups else None
        self._kept = [] if first is None else [
            i for i in range(first.num_columns) if first.column(i).path_in_schema in mapping]
        self.num_columns = len(self._kept)

    def row_group(self, index: int) -> "_RowGroupColumns":
        return _RowGroupColumns(self._metadata.row_group(index), self._kept)


class _RowGroupColumns:
    def __init__(self, row_group, kept: list[int]) -> None:
        self._row_group = row_group
        self._kept = kept
        self.num_rows = row_group.num_rows
        self.num_columns = len(kept)

    def column(self, index: int):
        return self._row_group.column(self._kept[index])


def _arrays(values: RecordColumns, partition: int) -> list[pa.Array]:
    """The record columns of ``RECORD_SCHEMA`` (pyarrow takes the property dicts as map values)."""
    n = len(values)
    columns = [[partition] * n, values.offset, values.publish, values.event, values.key, values.value,
               values.properties, values.producer]
    return [pa.array(column, type=field.type) for column, field in zip(columns, RECORD_SCHEMA)]


def build_table(partition: int, first: int, entries: Sequence[tuple[int, bytes | memoryview]],
                aborted: TxnView | None = None, schema_columns=None) -> pa.Table:
    """The rows of ``entries`` (the first at offset ``first``), each entry on its first record's row.

    Entries without rows (markers, and records of transactions ``aborted`` lists) ride
    with the row before them, or with the first row. A range without any record gets one
    row that only carries entries (offset = ``first``, every record column null;
    ``holds_records`` keeps such a file out of the table). Record values come from
    ``record_values``, as the rows of ``rows.entry_rows`` do. ``schema_columns``
    (``schema_columns.ArrowColumns``) adds the topic's schema fields, decoded from each
    value with the schema version its entry was written with, after the record columns.
    """
    columns = RecordColumns()
    carried: dict[int, list[tuple[int, bytes | memoryview]]] = {}  # row index -> entries it carries
    waiting: list[tuple[int, bytes | memoryview]] = []  # entries seen before the first row
    base = first
    versions: list[int | None] = []  # each row's schema version (with schema columns only)
    for count, data in entries:
        row = len(columns)
        columns.add_entry(base, data, aborted)
        if schema_columns is not None and len(columns) > row:
            versions += [schema_version(data)] * (len(columns) - row)
        if len(columns) > row:
            carried[row] = waiting + [(count, data)]
            waiting = []
        elif len(columns):
            carried.setdefault(row - 1, []).append((count, data))
        else:
            waiting.append((count, data))
        base += count
    if waiting:  # no record at all in the range
        columns.add_empty(first)
        carried[0] = waiting
    entry_columns = compacted_format.entry_columns([carried.get(i, ()) for i in range(len(columns))])
    if schema_columns is None:
        return pa.Table.from_arrays(_arrays(columns, partition) + list(entry_columns.values()), schema=SCHEMA)
    versions += [None] * (len(columns) - len(versions))  # the carrier row of a range without records
    decoded = [schema_columns.decode(value, version) for value, version in zip(columns.value, versions)]
    extra = [pa.array([row[i] for row in decoded], type=field.type) for i, field in enumerate(schema_columns.fields)]
    schema = pa.schema(list(RECORD_SCHEMA) + list(schema_columns.fields) + list(SCHEMA)[len(RECORD_SCHEMA):])
    return pa.Table.from_arrays(_arrays(columns, partition) + extra + list(entry_columns.values()), schema=schema)


def merge_tables(tables: Sequence[pa.Table]) -> pa.Table | None:
    """The rows of adjacent compacted objects' tables (in offset order) as one table, as
    ``build_table`` gives them for all their entries at once; None if their columns differ
    (schema columns of other schema versions: the range is then built from its entries).

    A carrier row (an object of a range without records) is folded into the row before it,
    or into the first row: the flattened entries keep their order, only row boundaries go.
    """
    schema = tables[0].schema.remove_metadata()
    if any(not t.schema.remove_metadata().equals(schema) for t in tables[1:]):
        return None
    table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables]).combine_chunks()
    carriers = table.column("producer_name").is_null()
    if not pc.any(carriers).as_py():
        return table
    entries = table.column(compacted_format.ENTRIES_COLUMN).chunk(0)
    counts = table.column(compacted_format.ENTRY_RECORDS_COLUMN).chunk(0)
    ends = pc.cumulative_sum(pc.list_value_length(entries)).to_pylist()
    kept = pc.indices_nonzero(pc.invert(carriers)).to_pylist()
    if not kept:  # no record in any of them: one carrier row, as for a range without records
        kept = [0]
    # Kept row j carries the entries up to the next kept row (the first: also those before it).
    offsets = pa.array([0] + [ends[k - 1] for k in kept[1:]] + [ends[-1]], pa.int32())
    rows = table.take(pa.array(kept, pa.int64()))
    for name, column in ((compacted_format.ENTRIES_COLUMN, entries),
                         (compacted_format.ENTRY_RECORDS_COLUMN, counts)):
        rows = rows.set_column(rows.schema.get_field_index(name), rows.schema.field(name),
                               pa.ListArray.from_arrays(offsets, column.flatten()))
    return rows
