"""The read tasks of the ``nereus`` data source, batch and streaming alike: a planned range of
one stream (``NereusRange``: offsets, aborted transactions, how to fill schema columns) and
how a task reads it (``read_partition``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from . import rows as _rows
from . import schema_columns as _columns
from .wal_access import WalAccess
from .worker_loop import worker_loop


class NereusRange(InputPartition):
    """One task: offsets ``[range.start, range.end)`` of one stream (and how to add schema columns)."""

    def __init__(self, metadata: str, objects: str, stream_range: _rows.StreamRange,
                 values: _columns.ValueColumns | None = None, wal_access: WalAccess | None = None) -> None:
        super().__init__(stream_range)
        self.metadata = metadata
        self.objects = objects
        self.range = stream_range
        self.values = values
        self.wal_access = wal_access


async def plan_values(meta, topic: str, schema: StructType) -> _columns.ValueColumns | None:
    """What read tasks need to fill the schema's extra columns (None: there are none)."""
    extra = _columns.extra_columns(schema)
    if not extra:
        return None
    return _columns.ValueColumns(tuple(extra), await _columns.topic_schemas(meta, topic))


def split_range(bounds: _rows.StreamRange, lo: int, hi: int, chunk: int) -> list[_rows.StreamRange]:
    """Offsets ``[lo, hi)`` of the stream of ``bounds`` in ranges of at most ``chunk`` offsets."""
    out = []
    for first in range(lo, hi, chunk):
        end = min(first + chunk, hi)
        aborted = tuple(a for a in bounds.aborted if a[1] < end and a[2] >= first)
        out.append(replace(bounds, start=first, end=end, aborted=aborted))
    return out


def read_partition(partition: InputPartition) -> Iterator[tuple]:
    """The rows of one planned range (batch and streaming tasks), schema columns appended."""
    if not isinstance(partition, NereusRange):
        return
    loop = worker_loop()
    if partition.values is None:
        yield from _drain(loop, _read_range(partition))
    else:
        decode = _columns.ValueDecoder(partition.values)
        for row, version in _drain(loop, _read_range(partition)):
            yield row + decode(row[6], version)


async def _read_range(p: NereusRange):
    from ..meta import connect
    from ..objstore import open_object_store

    meta = connect(p.metadata)
    objects = open_object_store(p.objects)
    try:
        read = _rows.read_rows if p.values is None else _rows.read_versioned_rows
        rows = read(meta, objects, p.range, p.wal_access)
        async for batch in rows:
            yield batch
    finally:
        await objects.close()
        await meta.close()


def _drain(loop: asyncio.AbstractEventLoop, agen) -> Iterator[tuple]:
    """Rows of an async generator of row lists, pulled one list at a time on ``loop``."""
    try:
        while True:
            try:
                batch = loop.run_until_complete(agen.__anext__())
            except StopAsyncIteration:
                return
            yield from batch
    finally:
        loop.run_until_complete(agen.aclose())


__all__ = ["NereusRange", "plan_values", "read_partition", "split_range"]
