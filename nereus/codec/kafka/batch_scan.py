"""The keys of many record batches at once, without decoding record by record.

A batch's records are ``[length][attributes][timestampDelta][offsetDelta][key]
[value][headers]`` back to back, every number a zigzag varint and ``length`` the
size of the rest of the record; where a record starts depends on the one before.
Many batches are walked side by side: step ``i`` reads record ``i`` of every batch
(one "lane" per batch) with numpy operations over all lanes (``nereus.lanes``).

Only what a key-compacted view needs is read: the offset and timestamp deltas, the
key and whether the value is null. Headers are skipped by the record length.
Malformed records raise InvalidBatch, as ``records.decode_records`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import lanes
from .batch import InvalidBatch


@dataclass(frozen=True, slots=True)
class ScannedRecords:
    """One row per record, in batch order; keys as (start, length) in ``buffer``."""

    buffer: np.ndarray  # uint8: the record sections back to back (padded)
    batch: np.ndarray  # int64: which batch each row is a record of
    offset_delta: np.ndarray  # int64
    timestamp_delta: np.ndarray  # int64
    key_start: np.ndarray  # int64
    key_length: np.ndarray  # int64 (-1: a null key)
    value_null: np.ndarray  # bool

    def key_array(self):
        """The keys as (int32 offsets of rows + 1, key bytes, validity): Arrow binary buffers."""
        has_key = self.key_length >= 0
        lengths = np.where(has_key, self.key_length, 0)
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if total >= 2**31:
            raise ValueError("the scanned keys exceed a 32-bit binary array")
        shift = np.repeat(self.key_start - offsets[:-1], lengths)
        data = self.buffer[shift + np.arange(total, dtype=np.int64)]
        return offsets.astype(np.int32), data, has_key


def _signed(buf: np.ndarray, buf_words: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, positions after them) of the zigzag varints at ``pos``: one word read
    for all lanes, a second pass only for varints longer than 7 bytes."""
    value, last = lanes.varint_words(buf_words[pos])
    after = pos + 1 + last.astype(np.int64)
    long = np.flatnonzero(last >= 7)
    if long.size:
        value[long], after[long] = lanes.varints(buf, buf_words, pos[long], InvalidBatch)
    return lanes.zigzag(value), after


def _length(buf: np.ndarray, buf_words: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``_signed`` for the record lengths of one step, with fewer operations when every
    length takes one or two bytes (records under 8 KiB: the usual case)."""
    low = (buf_words[pos] & np.uint64(0xFFFF)).view(np.int64)
    one = low & 0x80 == 0
    if not (one | (low < 0x8000)).all():
        return _signed(buf, buf_words, pos)
    value = np.where(one, low & 0x7F, (low & 0x7F) | (low >> 8 << 7))
    return (value >> 1) ^ -(value & 1), pos + 2 - one


def scan(sections: list[bytes | memoryview], counts: list[int]) -> ScannedRecords:
    """Walk the uncompressed record sections (a batch without its 61-byte header;
    ``counts[i]`` records each) side by side."""
    buf, starts, ends = lanes.concatenate(sections)
    words = lanes.words(buf)
    count = np.asarray(counts, np.int64)
    if (count < 0).any():
        raise InvalidBatch("negative record count")
    rows = int(count.sum())
    batch = np.empty(rows, np.int64)
    index = np.empty(rows, np.int64)
    body_start = np.empty(rows, np.int64)  # just past each record's length
    record_end = np.empty(rows, np.int64)
    pos = starts.copy()
    # Only the lengths chain one record to the next: the steps read them alone, and the
    # fields of every record are read after, in one pass over all the rows.
    for step, a, b, active in lanes.steps(count):
        p, end = pos[active], ends[active]
        if (p >= end).any():
            raise InvalidBatch(f"a batch ends before its record {step}")
        length, at = _length(buf, words, p)
        after = at + length
        if ((length < 0) | (after > end)).any():
            raise InvalidBatch("record length overruns the batch")
        batch[a:b], index[a:b], body_start[a:b], record_end[a:b] = active, step, at, after
        pos[active] = after
    # The rows in batch order from here: the reads below then go through the buffer in
    # order instead of jumping from batch to batch (a cache miss each).
    order = lanes.batch_order(count, batch, index)
    batch, body_start, record_end = batch[order], body_start[order], record_end[order]
    # Every read starts at most at the record's end (inside the buffer): a field that
    # overran it leaves the last position past the end, which the check below refuses.
    timestamp_delta, at = _signed(buf, words, np.minimum(body_start + 1, record_end))  # past the attributes
    offset_delta, at = _signed(buf, words, np.minimum(at, record_end))
    key_length, key_start = _signed(buf, words, np.minimum(at, record_end))
    vlen, at = _signed(buf, words, np.minimum(key_start + np.maximum(key_length, 0), record_end))
    if ((at + np.maximum(vlen, 0) > record_end) | (key_length < -1) | (vlen < -1)).any():
        raise InvalidBatch("record field overruns the record")
    value_null = vlen < 0
    return ScannedRecords(buf, batch, offset_delta, timestamp_delta, key_start, key_length, value_null)


__all__ = ["ScannedRecords", "scan"]
