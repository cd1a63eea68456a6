"""The keys of many batches at once, without a protobuf parse per message.

A batch is ``[u32 size][SingleMessageMetadata][payload]`` repeated; where a message
starts depends on the one before, so one batch cannot be split in one step. Many
batches can be walked side by side: step ``i`` reads message ``i`` of every batch
(one "lane" per batch) with numpy operations over all lanes, so the per-message
Python work of a protobuf parse becomes per-step array work.

Only what a key-compacted view needs is read from each SingleMessageMetadata:
``partition_key`` (2), ``payload_size`` (3), ``event_time`` (5),
``partition_key_b64_encoded`` (6), ``null_value`` (9) and ``null_partition_key``
(10); other fields are skipped by their wire type. Malformed input raises
MalformedBatch, as ``iter_batch`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import lanes
from .errors import MalformedBatch



@dataclass(frozen=True, slots=True)
class ScannedBatches:
    """One row per message, step after step (message 0 of every batch, then message 1
    of every batch that has one, ...); keys as (start, length) in ``buffer``."""

    buffer: np.ndarray  # uint8: the batches back to back (padded)
    batch: np.ndarray  # int64: which batch each row is a message of
    index: np.ndarray  # int64: its index in that batch
    has_key: np.ndarray  # bool
    key_start: np.ndarray  # int64
    key_length: np.ndarray  # int64
    key_b64: np.ndarray  # bool
    payload_size: np.ndarray  # int64
    event_time: np.ndarray  # int64 (0: unset)
    null_value: np.ndarray  # bool
    message_start: np.ndarray  # int64: where each message (its u32 size) starts in ``buffer``
    message_end: np.ndarray  # int64: just past its payload
    batch_start: np.ndarray  # int64: where each batch starts in ``buffer``
    key_head: np.ndarray  # uint64: the 8 bytes where a key starts when the metadata starts with it

    def rows_by_batch(self, counts: list[int] | np.ndarray) -> np.ndarray:
        """The rows in batch order: element ``first + i`` is the row of message ``i`` of a
        batch whose messages start at ``first`` (the running sum of ``counts``)."""
        return lanes.batch_order(np.asarray(counts, np.int64), self.batch, self.index)

    def key_views(self) -> np.ndarray:
        """The keys as Arrow binary views into ``buffer`` (rows x 2 uint64: length and the
        first 12 bytes inline, or length, 4-byte prefix, buffer 0 and offset): no key is
        copied but the short ones; keyless rows are empty."""
        if len(self.buffer) >= 2**31:
            raise ValueError("a binary view offset is 32-bit: the scanned buffer is too large")
        length = np.where(self.has_key, self.key_length, 0).astype(np.uint64)
        start = np.where(self.has_key, self.key_start, 0)
        words = _words(self.buffer)
        shift = np.minimum(length, 8) * _EIGHT
        head = self.key_head.copy()
        elsewhere = np.flatnonzero(self.has_key & (start != self.message_start + 6))
        head[elsewhere] = words[start[elsewhere]]
        low = head & np.where(shift == 64, np.uint64(2**64 - 1), (_ONE << (shift & np.uint64(63))) - _ONE)
        views = np.empty((len(length), 2), np.uint64)
        views[:, 0] = length | ((low & np.uint64(0xFFFFFFFF)) << np.uint64(32))
        views[:, 1] = low >> np.uint64(32)
        over8 = np.flatnonzero((length > 8) & (length <= 12))
        if over8.size:
            high = words[start[over8] + 8] & ((_ONE << ((length[over8] - 8) * _EIGHT)) - _ONE)
            views[over8, 1] |= high << np.uint64(32)
        long = np.flatnonzero(length > 12)
        views[long, 1] = start[long].astype(np.uint64) << np.uint64(32)
        return views

    def key_bytes(self) -> tuple[np.ndarray, np.ndarray]:
        """(int32 offsets of len rows + 1, concatenated key bytes); keyless rows are empty."""
        lengths = np.where(self.has_key, self.key_length, 0)
        offsets = np.zeros(len(lengths) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        if total == 0:
            return offsets.astype(np.int32), np.zeros(0, np.uint8)
        shift = np.repeat(np.where(self.has_key, self.key_start, 0) - offsets[:-1], lengths)
        return offsets.astype(np.int32), self.buffer[shift + np.arange(total, dtype=np.int64)]


class UnsupportedLayout(MalformedBatch):
    """Something the scan does not read (a field number above 15, a fixed-size or group
    field); the caller parses these batches with protobuf instead."""


_ONE, _EIGHT, _BYTE = lanes.ONE, lanes.EIGHT, lanes.BYTE
_words, _varint_words = lanes.words, lanes.varint_words


def _varint(buf: np.ndarray, words: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return lanes.varints(buf, words, pos, MalformedBatch)


# Per tag byte (field number << 3 | wire type): unreadable here, length-delimited, the key,
# and the row of ``values`` its value goes to (6: skipped).
_FIELDS = {2: (0, 2), 3: (1, 0), 5: (2, 0), 6: (3, 0), 9: (4, 0), 10: (5, 0), 1: (6, 2), 7: (6, 2), 4: (6, 0),
           8: (6, 0)}
_TAGS = np.arange(256)
_UNREADABLE = (_TAGS >= 0x80) | ((_TAGS & 7 != 0) & (_TAGS & 7 != 2)) | (_TAGS >> 3 == 0)
_LENGTH = ((_TAGS & 7) == 2).astype(np.int64)
_SLOT = np.full(256, 6, np.int64)
for _field, (_slot, _wire) in _FIELDS.items():
    _UNREADABLE[_field << 3 | (_wire ^ 2)] = True  # a known field of the other wire type
    _SLOT[_field << 3 | _wire] = _slot


class _Fields:
    """Where the fields read from each message's metadata go (one row per message)."""

    def __init__(self, buf: np.ndarray, rows: int) -> None:
        self.buf, self.words, self.rows = buf, _words(buf), rows
        self.values = np.zeros((7, rows), np.int64)
        self.values[1] = -1  # payload_size: required
        self.starts = np.zeros((7, rows), np.int64)  # where each field's value starts (the key's is used)
        self.row_of_tag = _SLOT * rows

    def walk(self, at: np.ndarray, limit: np.ndarray, r: np.ndarray) -> None:
        """Read the fields from ``at`` to ``limit`` of rows ``r``, all lanes a field at a time."""
        words, flat, flat_start = self.words, self.values.reshape(-1), self.starts.reshape(-1)
        going = at < limit
        if not going.all():
            at, limit, r = at[going], limit[going], r[going]
        while at.size:
            word = words[at]
            tag = (word & _BYTE).astype(np.intp)
            if _UNREADABLE[tag].any():
                raise UnsupportedLayout("a field number above 15, or of a wire type not read here")
            value = (word >> _EIGHT) & _BYTE
            if (value < 0x80).all():  # one-byte values on every lane (lengths, small numbers): the usual step
                after = at + 2
            else:
                value, last = _varint_words(word >> _EIGHT)
                if (last >= 7).any():  # not ended in the 7 bytes read: read again
                    again = np.flatnonzero(last >= 7)
                    value[again], after_again = _varint(self.buf, words, at[again] + 1)
                    last[again] = after_again - at[again] - 2
                after = at + 2 + last.astype(np.int64)
            signed = value.view(np.int64)
            cell = self.row_of_tag[tag] + r
            flat[cell] = signed
            flat_start[cell] = after
            at = after + signed * _LENGTH[tag]
            if ((at > limit) | (at < after)).any():
                raise MalformedBatch("a field overruns its SingleMessageMetadata")
            going = at < limit
            if not going.all():
                at, limit, r = at[going], limit[going], r[going]


# The continuation bits of the first n bytes of a word, and those a varint of n bytes has.
_CONT_MASK = np.array([sum(0x80 << 8 * i for i in range(n)) for n in range(8)], np.uint64)
_CONT_VARINT = np.array([sum(0x80 << 8 * i for i in range(n - 1)) for n in range(8)], np.uint64)


def _only_sequence(words: np.ndarray, at: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Whether the metadata from ``at`` to ``limit`` is one ``sequence_id`` (the usual rest
    after ``payload_size``), or nothing."""
    word = words[at]
    n = limit - at - 1  # the varint's length if it is one sequence_id
    nn = np.clip(n, 0, 7)
    one = ((word & _BYTE) == 0x40) & (n >= 1) & (n <= 7) & (((word >> _EIGHT) & _CONT_MASK[nn]) == _CONT_VARINT[nn])
    return one | (at == limit)


def scan(batches: list[bytes | memoryview], counts: list[int]) -> ScannedBatches:
    """Walk the uncompressed ``batches`` (``counts[i]`` messages each) side by side.

    Each step reads, of message ``i`` of every batch, only what leads to the next
    message when its metadata starts as protobuf writes it, ``partition_key`` (short)
    then ``payload_size``; the rest of every metadata is read in one pass at the end
    (a metadata laid out otherwise is read whole in its step)."""
    buf, starts, ends = lanes.concatenate(batches)
    count = np.asarray(counts, np.int64)
    if (count < 0).any():
        raise MalformedBatch("negative message count")
    rows = int(count.sum())
    fields = _Fields(buf, rows)
    words, be32 = fields.words, np.ndarray((len(buf) - 3,), ">u4", buf, 0, (1,))
    key_length, key_start, payload_size = fields.values[0], fields.starts[0], fields.values[1]
    batch = np.empty(rows, np.int64)
    index = np.empty(rows, np.int64)
    message_start = np.empty(rows, np.int64)
    message_end = np.empty(rows, np.int64)
    rest = np.empty(rows, np.int64)  # where each metadata's fields not read in its step start
    meta_ends = np.empty(rows, np.int64)
    key_head = np.empty(rows, np.uint64)
    pos = starts.copy()
    for step, a, b, active in lanes.steps(count):
        p, end = pos[active], ends[active]
        if (end - p < 4).any():
            raise MalformedBatch(f"a batch ends before its message {step}")
        meta_end = p + 4 + be32[p].astype(np.int64)
        if (meta_end > end).any():
            raise MalformedBatch(f"message {step}: metadata size overruns the batch")
        word = words[p + 4]
        key_head[a:b] = words[p + 6]
        tag, length = word & _BYTE, ((word >> _EIGHT) & _BYTE).view(np.int64)
        keyed = tag == 0x12
        at = np.minimum(p + np.where(keyed, length + 6, 4), meta_end)  # past the batch: not the usual layout
        second = words[at]
        payload = ((second >> _EIGHT) & _BYTE).view(np.int64)
        after = at + 2
        # the usual layout: [partition_key of < 128 bytes] then payload_size < 128 (one byte)
        fast = ((keyed & (length < 0x80)) | (tag == 0x18)) & ((second & _BYTE) == 0x18) & (payload < 0x80)
        fast &= after <= meta_end
        after = np.minimum(after, meta_end)
        keyed &= fast
        after = np.where(_only_sequence(words, after, meta_end), meta_end, after)
        key_length[a:b] = np.where(keyed, length, 0)
        key_start[a:b] = np.where(keyed, p + 6, 0)
        if fast.all():
            payload_size[a:b] = payload
        else:
            slow = np.flatnonzero(~fast)
            payload_size[a:b] = np.where(fast, payload, -1)
            fields.walk(p[slow] + 4, meta_end[slow], slow + a)
            payload = payload_size[a:b]
            after[slow] = meta_end[slow]
            if (payload < 0).any():
                raise MalformedBatch(f"message {step}: SingleMessageMetadata without payload_size")
        nxt = meta_end + payload
        if (nxt > end).any():
            raise MalformedBatch(f"message {step}: payload size overruns the batch")
        batch[a:b] = active
        index[a:b] = step
        message_start[a:b] = p
        meta_ends[a:b] = meta_end
        rest[a:b] = after
        message_end[a:b] = nxt
        pos[active] = nxt
    chained = payload_size.copy()
    other = np.flatnonzero(rest < meta_ends)
    fields.walk(rest[other], meta_ends[other], other)
    if (payload_size != chained).any():  # a second payload_size after the first: protobuf keeps the last
        raise UnsupportedLayout("payload_size given twice in a SingleMessageMetadata")
    values = fields.values
    has_key = key_start != 0
    return ScannedBatches(buf, batch, index, has_key & (values[5] == 0), key_start, key_length, values[3] != 0,
                          payload_size, values[2], values[4] != 0, message_start, message_end, starts, key_head)


__all__ = ["ScannedBatches", "UnsupportedLayout", "scan"]
