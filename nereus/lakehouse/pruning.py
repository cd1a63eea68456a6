"""What a read of ``format("nereus")`` can skip: pushed-down filters and ``startingTimestamp``.

Filters on ``partition`` and ``offset`` are applied exactly when the read is planned
(the tasks read only the partitions and offsets they allow). Filters on
``publish_time`` and ``event_time`` skip the compacted objects whose Parquet
statistics (min/max of the column) lie outside the range; Spark still applies them
to the rows that are read (WAL slices carry no statistics).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from ..storage import view
from . import rows as _rows

TIME_COLUMNS = ("publish_time", "event_time")
_EXACT = ("partition", "offset")
_PARQUET_TAIL = 8  # footer length (4 bytes, little-endian) + b"PAR1"


def _micros(value) -> int | None:
    """A pushed timestamp literal in microseconds since the epoch (naive: UTC, as Spark sends it)."""
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    delta = value - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@dataclass
class Pruning:
    """Bounds a read must respect; the default prunes nothing."""

    partitions: list[tuple[str, object]] = field(default_factory=list)  # (filter name, value) on partition
    offset_lo: int = 0
    offset_hi: int | None = None  # exclusive
    times: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # column -> [lo, hi] micros

    def push(self, filters: Iterable) -> list:
        """Take what can prune from Spark's filters; return those Spark must still apply."""
        rest = []
        for f in filters:
            name = type(f).__name__
            column = getattr(f, "attribute", ("",))
            column = column[0] if len(column) == 1 else ""
            value = getattr(f, "value", None)
            if column in _EXACT and self._exact(column, name, value):
                continue
            if column in TIME_COLUMNS:
                self._time(column, name, value)
            rest.append(f)
        return rest

    def _exact(self, column: str, name: str, value) -> bool:
        values = tuple(value) if name == "In" and isinstance(value, (tuple, list)) else (value,)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return False
        if column == "partition":
            if name not in ("EqualTo", "In", "GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual"):
                return False
            self.partitions.append((name, value))
            return True
        lo, hi = {"EqualTo": (value, value + 1) if name == "EqualTo" else None,
                  "GreaterThan": (value + 1, None), "GreaterThanOrEqual": (value, None),
                  "LessThan": (None, value), "LessThanOrEqual": (None, value + 1)}.get(name) or (None, None)
        if name == "In":
            lo, hi = min(values, default=0), max(values, default=-1) + 1
            return self._bound(lo, hi) and False  # bounded, but Spark keeps the exact set
        if lo is None and hi is None:
            return False
        return self._bound(lo, hi)

    def _bound(self, lo: int | None, hi: int | None) -> bool:
        if lo is not None:
            self.offset_lo = max(self.offset_lo, lo)
        if hi is not None:
            self.offset_hi = hi if self.offset_hi is None else min(self.offset_hi, hi)
        return True

    def _time(self, column: str, name: str, value) -> None:
        micros = _micros(value)
        if micros is None:
            return
        lo, hi = self.times.get(column, (None, None))
        if name in ("GreaterThan", "GreaterThanOrEqual", "EqualTo"):
            lo = micros if lo is None else max(lo, micros)
        if name in ("LessThan", "LessThanOrEqual", "EqualTo"):
            hi = micros if hi is None else min(hi, micros)
        self.times[column] = (lo, hi)

    def keeps_partition(self, partition: int) -> bool:
        for name, value in self.partitions:
            ok = {"EqualTo": lambda: partition == value, "In": lambda: partition in tuple(value),
                  "GreaterThan": lambda: partition > value, "GreaterThanOrEqual": lambda: partition >= value,
                  "LessThan": lambda: partition < value, "LessThanOrEqual": lambda: partition <= value}[name]()
            if not ok:
                return False
        return True

    def offsets(self, lo: int, hi: int) -> tuple[int, int]:
        """``[lo, hi)`` narrowed by the offset filters (empty: ``lo >= hi``)."""
        return max(lo, self.offset_lo), hi if self.offset_hi is None else min(hi, self.offset_hi)

    def excludes(self, stats: dict[str, tuple[int, int]]) -> bool:
        """Whether an object with these column (min, max) statistics holds no row the time filters keep."""
        for column, (lo, hi) in self.times.items():
            if column not in stats:
                continue
            smin, smax = stats[column]
            if (lo is not None and smax < lo) or (hi is not None and smin > hi):
                return True
        return False


async def time_stats(objects, key: str) -> dict[str, tuple[int, int]]:
    """(min, max) micros of the time columns of a compacted object, from its Parquet footer only.

    A column without statistics in some row group (or only nulls) is left out.
    """
    size = (await objects.head(key)).size
    tail = await objects.get(key, size - _PARQUET_TAIL, size)
    (length,) = struct.unpack("<I", tail[:4])
    footer = await objects.get(key, size - _PARQUET_TAIL - length, size)
    metadata = pq.read_metadata(pa.BufferReader(b"PAR1" + footer))
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    out: dict[str, tuple[int, int]] = {}
    for column in TIME_COLUMNS:
        if column not in names:
            continue
        index, lows, highs = names.index(column), [], []
        for g in range(metadata.num_row_groups):
            chunk = metadata.row_group(g).column(index)
            stats = chunk.statistics
            if chunk.num_values and stats is not None and stats.null_count == chunk.num_values:
                continue
            if stats is None or not stats.has_min_max:
                break
            lows.append(stats.min_raw)
            highs.append(stats.max_raw)
        else:
            if lows:
                out[column] = (min(lows), max(highs))
    return out


async def kept_ranges(meta, objects, bounds: _rows.StreamRange, lo: int, hi: int,
                      pruning: Pruning) -> list[tuple[int, int]]:
    """``[lo, hi)`` of one stream without the compacted objects the time filters exclude."""
    if lo >= hi:
        return []
    if not pruning.times:
        return [(lo, hi)]
    out, position = [], lo
    async for entry in view.indexed_entries(meta, bounds.stream_id, lo):
        if entry.base >= hi:
            break
        if entry.generation == 0 or entry.last < position:
            continue
        if pruning.excludes(await time_stats(objects, entry.object)):
            if entry.base > position:
                out.append((position, min(entry.base, hi)))
            position = entry.last + 1
    if position < hi:
        out.append((position, hi))
    return out


async def offset_for_time(meta, objects, bounds: _rows.StreamRange, millis: int) -> int:
    """The first offset of the stream whose record was published at or after ``millis`` (else its end).

    Compacted objects published entirely before it are skipped by their statistics;
    from the first other slice on, records are read until one qualifies.
    """
    micros = millis * 1000
    position = bounds.start
    early = Pruning(times={"publish_time": (micros, None)})
    async for entry in view.indexed_entries(meta, bounds.stream_id, position):
        if entry.last < position:
            continue
        if entry.generation == 0 or not early.excludes(await time_stats(objects, entry.object)):
            break
        position = entry.last + 1
    rest = replace(bounds, start=position)
    async for batch in _rows.read_rows(meta, objects, rest):
        for row in batch:
            if row[3] is not None and _micros(row[3]) >= micros:
                return row[2]
    return bounds.end
