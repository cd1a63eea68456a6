"""Reading one field at many positions of a byte buffer at once (numpy), for codecs
that walk many batches side by side ("lanes"): the little-endian word at each
position, and protobuf-style base-128 varints at each position.

The buffer must be padded with at least ``PAD`` zero bytes, so a read near its end
never gathers past it.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

PAD = 16
_HIGH = np.uint64(0x8080808080808080)
ONE, EIGHT, BYTE = np.uint64(1), np.uint64(8), np.uint64(0xFF)


def concatenate(sections: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the sections back to back as one uint8 buffer, padded; where each starts; where each ends)."""
    sizes = np.fromiter((memoryview(b).nbytes for b in sections), np.int64, len(sections))
    starts = np.zeros(len(sections), np.int64)
    if len(sections) > 1:
        np.cumsum(sizes[:-1], out=starts[1:])
    return np.frombuffer(b"".join([*sections, bytes(PAD)]), np.uint8), starts, starts + sizes


def steps(count: np.ndarray) -> Iterator[tuple[int, int, int, np.ndarray]]:
    """The steps of a walk over sections of ``count[i]`` items each: ``(step, first row,
    end row, lanes)``, step ``i`` reading item ``i`` of each section in ``lanes`` (those
    that have one) into rows ``[first, end)``; the rows of all steps number ``count.sum()``."""
    lanes = np.flatnonzero(count > 0)
    min_count = count[lanes].min() if lanes.size else 0
    step, first = 0, 0
    while lanes.size:
        yield step, first, first + lanes.size, lanes
        step, first = step + 1, first + lanes.size
        if step >= min_count:
            lanes = lanes[count[lanes] > step]
            min_count = count[lanes].min() if lanes.size else 0


def batch_order(count: np.ndarray, section: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The permutation that puts rows of ``steps`` (item ``index`` of section ``section``)
    in section order: element ``first + i`` is the row of item ``i`` of a section whose
    items start at ``first`` (the running sum of ``count``)."""
    out = np.empty(len(section), np.int64)
    out[(np.cumsum(count) - count)[section] + index] = np.arange(len(section), dtype=np.int64)
    return out


def words(buf: np.ndarray) -> np.ndarray:
    """The little-endian uint64 starting at each byte of ``buf`` (unaligned views, no copy)."""
    return np.ndarray((len(buf) - 7,), "<u8", buf, 0, (1,))


def varint_words(word: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, index of the last byte; 8: not ended) of the varints starting each ``word``."""
    stops = ~word & _HIGH
    low = stops & -stops  # the high bit of the varint's last byte (0: none)
    last = np.bitwise_count(low - ONE) >> 3
    x = word & ((low << ONE) - ONE) & np.uint64(0x7F7F7F7F7F7F7F7F)
    x = ((x & np.uint64(0x7F007F007F007F00)) >> ONE) | (x & np.uint64(0x007F007F007F007F))
    x = ((x & np.uint64(0x3FFF00003FFF0000)) >> np.uint64(2)) | (x & np.uint64(0x00003FFF00003FFF))
    x = ((x & np.uint64(0x0FFFFFFF00000000)) >> np.uint64(4)) | (x & np.uint64(0x000000000FFFFFFF))
    return x, last


def varints(buf: np.ndarray, buf_words: np.ndarray, pos: np.ndarray,
            error: type[Exception] = ValueError) -> tuple[np.ndarray, np.ndarray]:
    """(values as uint64, positions after them) of the varints at ``pos``; a varint
    longer than 10 bytes raises ``error``."""
    value, last = varint_words(buf_words[pos])
    length = last.astype(np.int64) + 1
    long = np.flatnonzero(last == 8)
    if long.size:  # 9 or 10 bytes (values from 2**56)
        ninth, tenth = buf[pos[long] + 8], buf[pos[long] + 9]
        ten = (ninth & 0x80) != 0
        if (ten & ((tenth & 0xFE) != 0)).any():
            raise error("varint longer than 10 bytes")
        value[long] |= ((ninth & 0x7F).astype(np.uint64) << np.uint64(56)
                        | (ten * (tenth & 1)).astype(np.uint64) << np.uint64(63))
        length[long] = 9 + ten
    return value, pos + length


def zigzag(value: np.ndarray) -> np.ndarray:
    """Signed values of zigzag-encoded varints (Kafka's and protobuf's sint64)."""
    return (value >> ONE).view(np.int64) ^ -(value & ONE).view(np.int64)


__all__ = ["BYTE", "EIGHT", "ONE", "PAD", "batch_order", "concatenate", "steps", "varint_words", "varints", "words",
           "zigzag"]
