"""Arrow columns to and from numpy without pyarrow's pandas-aware conversions.

``pa.array``, ``pa.scalar``, ``Array.to_numpy``, ``Table.group_by`` (pyarrow.acero,
pyarrow.dataset) and ``pq.read_table`` import pandas on first use: about half a second
and tens of MB that a broker's first key-view build or load would pay. These helpers
go through the buffers instead (fixed-width columns without nulls, binary columns).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

_NUMPY = {pa.int64(): np.int64, pa.int32(): np.int32, pa.uint64(): np.uint64}


def array(values: np.ndarray, type: pa.DataType) -> pa.Array:
    """A column of ``type`` (int32, int64, uint64 or bool) holding ``values`` (no nulls)."""
    n = len(values)
    if type == pa.bool_():
        data = np.packbits(np.asarray(values, np.bool_), bitorder="little")
    else:
        data = np.ascontiguousarray(values, _NUMPY[type])
    return pa.Array.from_buffers(type, n, [None, pa.py_buffer(data)])


def binary(items: Sequence[bytes | memoryview | None]) -> pa.Array | pa.ChunkedArray:
    """A binary column of ``items`` (None: null); chunked past 2 GB of values."""
    n = len(items)
    sizes = np.fromiter((0 if item is None else memoryview(item).nbytes for item in items), np.int64, n)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] >= 2**31 and n > 1:
        halves = (binary(items[:n // 2]), binary(items[n // 2:]))
        return pa.chunked_array([c for half in halves for c in getattr(half, "chunks", [half])], pa.binary())
    valid_ = np.fromiter((item is not None for item in items), np.bool_, n)
    bitmap = None if valid_.all() else pa.py_buffer(np.packbits(valid_, bitorder="little"))
    data = b"".join([item for item in items if item is not None])
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


def numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a fixed-width integer or bool column (nulls read as whatever they hold)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    n, offset = len(column), column.offset
    buffer = column.buffers()[1]
    if column.type == pa.bool_():
        if buffer is None:
            return np.zeros(n, np.bool_)
        bits = np.unpackbits(np.frombuffer(buffer, np.uint8), bitorder="little")
        return bits[offset:offset + n].astype(np.bool_)
    dtype = _NUMPY[column.type]
    if buffer is None:
        return np.zeros(n, dtype)
    return np.frombuffer(buffer, dtype)[offset:offset + n]


def valid(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which values of ``column`` are not null."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    bitmap = column.buffers()[0]
    if bitmap is None or column.null_count == 0:
        return np.ones(len(column), np.bool_)
    bits = np.unpackbits(np.frombuffer(bitmap, np.uint8), bitorder="little")
    return bits[column.offset:column.offset + len(column)].astype(np.bool_)


__all__ = ["array", "binary", "numpy", "valid"]
