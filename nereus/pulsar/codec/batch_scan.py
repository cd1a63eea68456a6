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

from .errors import MalformedBatch

_PAD = 16  # zero bytes after the buffer: a varint read never gathers past its end
_MAX_VARINT = 10


@dataclass(frozen=True, slots=True)
class ScannedBatches:
    """One row per message, lane after lane; keys as (start, length) in ``buffer``."""

    buffer: np.ndarray  # uint8: the batches back to back (padded)
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


_HIGH = np.uint64(0x8080808080808080)
_ONE, _EIGHT, _BYTE = np.uint64(1), np.uint64(8), np.uint64(0xFF)


def _words(buf: np.ndarray) -> np.ndarray:
    """The little-endian uint64 starting at each byte of ``buf`` (unaligned views)."""
    return np.ndarray((len(buf) - 7,), "<u8", buf, 0, (1,))


def _varint_words(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, index of the last byte; 8: not ended) of the varints starting each ``word``."""
    stops = ~word & _HIGH
    low = stops & -stops  # the high bit of the varint's last byte (0: none)
    last = np.bitwise_count(low - _ONE) >> 3
    x = word & ((low << _ONE) - _ONE) & np.uint64(0x7F7F7F7F7F7F7F7F)
    x = ((x & np.uint64(0x7F007F007F007F00)) >> _ONE) | (x & np.uint64(0x007F007F007F007F))
    x = ((x & np.uint64(0x3FFF00003FFF0000)) >> np.uint64(2)) | (x & np.uint64(0x00003FFF00003FFF))
    x = ((x & np.uint64(0x0FFFFFFF00000000)) >> np.uint64(4)) | (x & np.uint64(0x000000000FFFFFFF))
    return x, last


def _varint(buf: np.ndarray, words: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values as uint64, positions after them) of the varints at ``pos``."""
    value, last = _varint_words(words[pos])
    length = last.astype(np.int64) + 1
    long = np.flatnonzero(last == 8)
    if long.size:  # 9 or 10 bytes (values from 2**56)
        ninth, tenth = buf[pos[long] + 8], buf[pos[long] + 9]
        ten = (ninth & 0x80) != 0
        if (ten & ((tenth & 0xFE) != 0)).any():
            raise MalformedBatch("varint longer than 10 bytes in SingleMessageMetadata")
        value[long] |= ((ninth & 0x7F).astype(np.uint64) << np.uint64(56)
                        | (ten * (tenth & 1)).astype(np.uint64) << np.uint64(63))
        length[long] = 9 + ten
    return value, pos + length


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


def scan(batches: list[bytes | memoryview], counts: list[int]) -> ScannedBatches:
    """Walk the uncompressed ``batches`` (``counts[i]`` messages each) side by side."""
    sizes = np.fromiter((memoryview(b).nbytes for b in batches), np.int64, len(batches))
    starts = np.zeros(len(batches), np.int64)
    if len(batches) > 1:
        np.cumsum(sizes[:-1], out=starts[1:])
    ends = starts + sizes
    buf = np.frombuffer(b"".join([*batches, bytes(_PAD)]), np.uint8)
    words = _words(buf)
    count = np.asarray(counts, np.int64)
    if (count < 0).any():
        raise MalformedBatch("negative message count")
    rows = int(count.sum())
    first_row = np.cumsum(count) - count
    values = np.zeros((7, rows), np.int64)
    values[1] = -1  # payload_size: required
    flat = values.reshape(-1)
    starts_of = np.zeros((7, rows), np.int64)  # where each field's value starts (the key's is used)
    flat_start = starts_of.reshape(-1)
    row_of_tag = _SLOT * rows
    message_start = np.zeros(rows, np.int64)
    message_end = np.zeros(rows, np.int64)
    pos = starts.copy()
    lanes = np.flatnonzero(count > 0)
    step = 0
    while lanes.size:
        p, end = pos[lanes], ends[lanes]
        if (end - p < 4).any():
            raise MalformedBatch(f"a batch ends before its message {step}")
        size = (words[p] & np.uint64(0xFFFFFFFF)).astype(">u4").view("<u4").astype(np.int64)
        q, meta_end = p + 4, p + 4 + size
        if (meta_end > end).any():
            raise MalformedBatch(f"message {step}: metadata size overruns the batch")
        row = first_row[lanes] + step
        message_start[row] = p
        live = np.flatnonzero(q < meta_end)
        at, limit, r = q[live], meta_end[live], row[live]
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
                    value[again], after_again = _varint(buf, words, at[again] + 1)
                    last[again] = after_again - at[again] - 2
                after = at + 2 + last.astype(np.int64)
            signed = value.view(np.int64)
            cell = row_of_tag[tag] + r
            flat[cell] = signed
            flat_start[cell] = after
            at = after + signed * _LENGTH[tag]
            if ((at > limit) | (at < after)).any():
                raise MalformedBatch(f"message {step}: a field overruns its SingleMessageMetadata")
            going = at < limit
            if not going.all():
                at, limit, r = at[going], limit[going], r[going]
        payload = values[1, row]
        if (payload < 0).any():
            raise MalformedBatch(f"message {step}: SingleMessageMetadata without payload_size")
        nxt = meta_end + payload
        if (nxt > end).any():
            raise MalformedBatch(f"message {step}: payload size overruns the batch")
        pos[lanes] = nxt
        message_end[row] = nxt
        step += 1
        lanes = lanes[count[lanes] > step]
    key_start = starts_of[0]
    has_key = key_start != 0
    return ScannedBatches(buf, has_key & (values[5] == 0), key_start, values[0], values[3] != 0, values[1],
                          values[2], values[4] != 0, message_start, message_end, starts)


__all__ = ["ScannedBatches", "UnsupportedLayout", "scan"]
