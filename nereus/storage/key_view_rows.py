"""The rows of a key view, in memory: a build's input as columns and their reduction (pure, pyarrow).

``BuildInput`` gathers the records a build reads (their keys, and the stored entries
they came from); ``merge`` joins them to the previous view's rows and keeps the latest
row of each key (and every keyless row), tombstones until their retention ends, with
each surviving entry's bytes on its first row. ``key_view.py`` reads and writes them.
"""

from __future__ import annotations

import collections
import io
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import columns
from .api import FetchedEntry

#: (offsets, keys, tombstones, timestamps in ms) of the records of one stored entry.
EntryKeys = tuple[list[int], list[bytes | None], list[bool], list[int]]
#: Gives the keys of a stored entry whose first record is at offset ``base``.
KeyExtractor = Callable[[int, memoryview], EntryKeys]
#: The keys of many stored entries at once, as a table of ``KEY_SCHEMA`` (any row order):
#: for extractors that are much cheaper per record when given many entries.
EntriesKeyExtractor = Callable[[list[FetchedEntry]], pa.Table]
#: Stored entries reduced to their records at the given indexes (same record counts and
#: offsets; what the others become is the protocol's business), each None: keep it whole.
EntryShrinker = Callable[[list[tuple[bytes | memoryview, tuple[int, ...]]]], list[bytes | None]]

SCHEMA = pa.schema([("offset", pa.int64()), ("key", pa.binary()), ("tombstone", pa.bool_()),
                    ("timestamp", pa.int64()), ("entry_base", pa.int64()), ("entry_records", pa.int32()),
                    ("entry", pa.binary())])
KEY_SCHEMA = pa.schema([f for f in SCHEMA if f.name != "entry"])


class BuildInput:
    """The records of ``[previous horizon, new horizon)`` as columns, and their entries."""

    def __init__(self) -> None:
        self.offset: list[int] = []
        self.key: list[bytes | None] = []
        self.tombstone: list[bool] = []
        self.timestamp: list[int] = []
        self.entry_base: list[int] = []
        self.entry_records: list[int] = []
        self.entries: dict[int, bytes | memoryview] = {}
        self.tables: list[pa.Table] = []
        self.latest: pa.Table | None = None  # the running latest-per-key of reduced ranges
        self._ranges: collections.deque[list[int]] = collections.deque()  # entries added, keys not yet
        self._keyed: set[int] = set()  # entries whose keys are in ``latest``
        self.bytes = 0
        self.records = 0

    def add_many(self, got: list[FetchedEntry], extract: EntriesKeyExtractor) -> None:
        self.add_entries(got)
        self.add_keys(extract(got))

    def add_entries(self, got: list[FetchedEntry]) -> None:
        """Entries whose keys come apart (``add_keys``, in the same order)."""
        for entry in got:
            self.bytes += len(entry.data)
            self.entries[entry.base_offset] = entry.data
        self._ranges.append([entry.base_offset for entry in got])

    def add_keys(self, table: pa.Table, records_in: int | None = None, reduced: bool = False) -> None:
        """Keys of entries added (``records_in``: how many records they came from, when
        ``table`` holds only the latest of each key, see ``latest_of``). ``reduced``: the
        table joins the running latest-per-key of the ranges added so far, and the entries
        left without a row there are let go, so a build holds about an entry per key, not
        the whole stream it reads (a pyarrow group-by off the event loop's hands: call
        this in an executor)."""
        table = table.select(KEY_SCHEMA.names).cast(KEY_SCHEMA)
        self.records += table.num_rows if records_in is None else records_in
        if not reduced:
            self.tables.append(table)
            if self._ranges:
                self._ranges.popleft()  # kept whole: never let go
            return
        running = table if self.latest is None else pa.concat_tables([self.latest, table]).combine_chunks()
        keep = _latest_per_key(running.column("key"), columns.numpy(running.column("offset")))
        self.latest = running if keep.all() else running.filter(columns.array(keep, pa.bool_()))
        self._keyed.update(self._ranges.popleft())  # ranges come back in the order they were added
        kept = set(pc.unique(self.latest.column("entry_base")).to_pylist())
        for base in [b for b in self._keyed if b not in kept]:
            del self.entries[base]
            self._keyed.discard(base)

    def table(self) -> pa.Table:
        """All the records added, as one table of ``KEY_SCHEMA``."""
        fresh = pa.table([
            columns.array(np.array(self.offset, np.int64), pa.int64()), columns.binary(self.key),
            columns.array(np.array(self.tombstone, np.bool_), pa.bool_()),
            columns.array(np.array(self.timestamp, np.int64), pa.int64()),
            columns.array(np.array(self.entry_base, np.int64), pa.int64()),
            columns.array(np.array(self.entry_records, np.int32), pa.int32())], schema=KEY_SCHEMA)
        tables = [*self.tables, *([self.latest] if self.latest is not None else [])]
        return pa.concat_tables([fresh, *tables]) if tables else fresh

    def add(self, entry: FetchedEntry, extract: KeyExtractor) -> None:
        offsets, keys, tombstones, stamps = extract(entry.base_offset, memoryview(entry.data))
        n = len(offsets)
        self.bytes += len(entry.data)
        if not n:
            return  # markers, control batches: nothing a view serves
        self.offset += offsets
        self.key += keys
        self.tombstone += tombstones
        self.timestamp += stamps
        self.entry_base += [entry.base_offset] * n
        self.entry_records += [entry.record_count] * n
        self.records += n
        self.entries[entry.base_offset] = entry.data


def merge(previous: pa.Table | None, new: BuildInput, *, now_ms: int, delete_retention_ms: int,
          shrink: EntryShrinker | None = None) -> pa.Table:
    """The rows of the new view: previous rows + new records, the latest per key (pure).

    ``shrink``: applied to each entry that lost records in this merge."""
    fresh = new.table()
    base_entries: dict[int, bytes | memoryview] = dict(new.entries)
    if previous is not None and previous.num_rows:
        blobs = previous.column("entry").combine_chunks()
        for i, base in enumerate(previous.column("entry_base").to_pylist()):
            if blobs[i].is_valid and base not in base_entries:
                base_entries[base] = blobs[i].as_buffer()
        rows = pa.concat_tables([previous.drop_columns(["entry"]), fresh])
    else:
        rows = fresh
    rows = rows.combine_chunks()
    keep = _latest_per_key(rows.column("key"), columns.numpy(rows.column("offset")))
    expired = columns.numpy(rows.column("tombstone"))
    if delete_retention_ms > 0:  # 0: tombstones go at once, with their keys (Pulsar's compactor)
        expired &= columns.numpy(rows.column("timestamp")) < now_ms - delete_retention_ms
    rows = rows.filter(columns.array(keep & ~expired, pa.bool_()))
    rows = rows.take(columns.array(np.argsort(columns.numpy(rows.column("offset")), kind="stable"), pa.int64()))
    kept_before: dict[int, int] = {}
    if shrink is not None and previous is not None and previous.num_rows:
        counted = pc.value_counts(previous.column("entry_base")).flatten()
        kept_before = dict(zip(counted[0].to_pylist(), counted[1].to_pylist()))
    bases, offsets = rows.column("entry_base").to_pylist(), rows.column("offset").to_pylist()
    counts = rows.column("entry_records").to_pylist()
    column: list[bytes | memoryview | None] = []
    to_shrink: list[tuple[int, bytes | memoryview, tuple[int, ...]]] = []  # (row in column, entry, kept)
    i = 0
    while i < len(bases):
        base, j = bases[i], i + 1
        while j < len(bases) and bases[j] == base:
            j += 1
        blob = base_entries[base]
        if shrink is not None and j - i < counts[i] and kept_before.get(base) != j - i:
            to_shrink.append((len(column), blob, tuple(o - base for o in offsets[i:j])))
        column.append(blob)
        column += [None] * (j - i - 1)
        i = j
    if to_shrink:
        for (at, _, _), smaller in zip(to_shrink, shrink([(blob, keep) for _, blob, keep in to_shrink])):
            if smaller is not None:
                column[at] = smaller
    return rows.append_column("entry", columns.binary(column))


def latest_of(extract: EntriesKeyExtractor, entries: list[FetchedEntry]) -> tuple[pa.Table, int]:
    """(the keys of ``entries`` reduced to the latest row of each key and the keyless rows,
    the number of records they came from). A row a later row of its key replaces in the
    same range never reaches the view, so each range of a build is reduced on its own,
    beside the reads, and the final merge sees a few rows per key instead of all."""
    return latest_rows(extract(entries))


def latest_rows(table: pa.Table) -> tuple[pa.Table, int]:
    """``latest_of`` of rows already extracted."""
    count = table.num_rows
    if count:
        keep = _latest_per_key(table.column("key"), columns.numpy(table.column("offset")))
        if not keep.all():
            table = table.filter(columns.array(keep, pa.bool_()))
    return table, count


def _latest_per_key(keys: pa.ChunkedArray, offsets: np.ndarray) -> np.ndarray:
    """Which rows are the latest (highest offset) of their key, or have no key."""
    encoded = pc.dictionary_encode(keys).combine_chunks()
    has_key = columns.valid(keys)
    index = np.where(has_key, columns.numpy(encoded.indices), 0)
    latest = np.full(max(len(encoded.dictionary), 1), -1, np.int64)
    np.maximum.at(latest, index[has_key], offsets[has_key])
    return ~has_key | (offsets == latest[index])


def read_parquet(data: bytes | memoryview) -> pa.Table:
    """A Parquet object as a table (``pq.read_table`` would import pandas, see ``columns``)."""
    return pq.ParquetFile(pa.BufferReader(data)).read()


def encode(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    compression = {name: "none" if name == "entry" else "zstd" for name in table.column_names}
    pq.write_table(table.cast(SCHEMA), sink, compression=compression, row_group_size=64 * 1024)
    return sink.getvalue()


__all__ = ["BuildInput", "EntriesKeyExtractor", "EntryKeys", "EntryShrinker", "KEY_SCHEMA", "KeyExtractor", "SCHEMA",
           "encode", "latest_of", "latest_rows", "merge", "read_parquet"]
