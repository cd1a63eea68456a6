"""Decompressing record batch bodies with a bound on the output (no decompression bombs).

A client chooses what its compressed records expand to: a few kilobytes of zstd
or gzip can claim gigabytes. So the output is bounded before anything is
allocated for it. LZ4 frames, zstd frames and snappy blocks say how large their
parts decompress (block headers and maximum block sizes, the snappy length
prefix), so an upper bound is read from the framing without decompressing; gzip
says nothing trustworthy and is inflated in bounded steps. A body over the bound
raises ``RecordsTooLarge`` (an ``InvalidBatch``: the produce path answers
CORRUPT_MESSAGE, as Kafka does for records it cannot validate).
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from .batch import GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD, InvalidBatch

MAX_DECOMPRESSED = 64 << 20  # default bound on one batch's decompressed records
_XERIAL = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16
_STEP = 1 << 20  # gzip is inflated this much at a time
_U32 = struct.Struct("<I")
_I32BE = struct.Struct(">i")
_LZ4_MAGIC, _ZSTD_MAGIC = 0x184D2204, 0xFD2FB528
_LZ4_BLOCK_MAX = {4: 64 << 10, 5: 256 << 10, 6: 1 << 20, 7: 4 << 20}
_ZSTD_BLOCK_MAX = 128 << 10


class RecordsTooLarge(InvalidBatch):
    """The records would decompress to more than the bound."""


def decompress(codec: int, data: bytes | memoryview, limit: int = MAX_DECOMPRESSED) -> bytes:
    """The uncompressed records of a batch body, at most ``limit`` bytes; raises InvalidBatch."""
    if codec == NO_COMPRESSION:
        return bytes(data)
    if codec == GZIP:
        return b"".join(_gunzip(bytes(data), limit, keep=True))
    bound = decompressed_bound(codec, data)
    if bound > limit:
        raise RecordsTooLarge(f"records would decompress to up to {bound} bytes (limit {limit})")
    try:
        if codec == SNAPPY:
            out = _unsnappy(bytes(data))
        elif codec == LZ4:
            out = bytes(cramjam.lz4.decompress(bytes(data)))
        else:
            out = bytes(cramjam.zstd.decompress(bytes(data)))
    except (cramjam.DecompressionError, struct.error, ValueError) as exc:
        raise InvalidBatch(f"cannot decompress records (codec {codec}): {exc}") from None
    if len(out) > bound:  # the framing lied: the decoder should have refused
        raise InvalidBatch(f"records decompressed to {len(out)} bytes, more than their framing allows")
    return out


def check_decompressed(codec: int, data: bytes | memoryview, limit: int = MAX_DECOMPRESSED) -> None:
    """Raise InvalidBatch if the body would not decompress within ``limit`` (keeps no output)."""
    if codec == NO_COMPRESSION:
        return
    if codec == GZIP:
        for _ in _gunzip(bytes(data), limit, keep=False):
            pass
        return
    bound = decompressed_bound(codec, data)
    if bound > limit:
        raise RecordsTooLarge(f"records would decompress to up to {bound} bytes (limit {limit})")


def decompressed_bound(codec: int, data: bytes | memoryview) -> int:
    """An upper bound of the decompressed size, from the framing alone (not for gzip)."""
    view = memoryview(data)
    try:
        if codec == SNAPPY:
            return _snappy_bound(view)
        if codec == LZ4:
            return _lz4_bound(view)
        if codec == ZSTD:
            return _zstd_bound(view)
    except (IndexError, struct.error):
        raise InvalidBatch(f"compressed records end inside their framing (codec {codec})") from None
    raise InvalidBatch(f"unknown compression codec {codec}")


# -- gzip ------------------------------------------------------------------------------------
def _gunzip(data: bytes, limit: int, keep: bool):
    """Inflate every gzip member in steps; yields the output (nothing when not ``keep``)."""
    total = 0
    pending = data
    try:
        while True:
            inflater = zlib.decompressobj(wbits=31)
            chunk = inflater.decompress(pending, _STEP)
            while True:
                total += len(chunk)
                if total > limit:
                    raise RecordsTooLarge(f"records decompress to more than {limit} bytes")
                if keep and chunk:
                    yield chunk
                if inflater.eof or not inflater.unconsumed_tail and not chunk:
                    break
                chunk = inflater.decompress(inflater.unconsumed_tail, _STEP)
            if not inflater.eof:
                raise InvalidBatch("gzip records are truncated")
            pending = inflater.unused_data
            if not pending:
                return
    except zlib.error as exc:
        raise InvalidBatch(f"cannot decompress gzip records: {exc}") from None


# -- snappy ----------------------------------------------------------------------------------
def _uvarint(view: memoryview, pos: int) -> int:
    shift = value = 0
    while True:
        b = view[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value
        shift += 7
        if shift > 35:
            raise InvalidBatch("snappy length prefix too long")


def _xerial_blocks(view: memoryview):
    pos = _XERIAL_HEADER
    while pos < len(view):
        size = _I32BE.unpack_from(view, pos)[0]
        if size < 0 or pos + 4 + size > len(view):
            raise InvalidBatch("snappy block overruns the records")
        yield view[pos + 4:pos + 4 + size]
        pos += 4 + size


def _snappy_bound(view: memoryview) -> int:
    if bytes(view[:len(_XERIAL)]) == _XERIAL:  # Java's framed form: [length][block]...
        return sum(_uvarint(block, 0) for block in _xerial_blocks(view))
    return _uvarint(view, 0)  # a raw block starts with its exact uncompressed length


def _unsnappy(raw: bytes) -> bytes:
    if raw.startswith(_XERIAL):
        return b"".join(bytes(cramjam.snappy.decompress_raw(bytes(b))) for b in _xerial_blocks(memoryview(raw)))
    return bytes(cramjam.snappy.decompress_raw(raw))


# -- lz4 and zstd frames --------------------------------------------------------------------
def _frames_bound(view: memoryview, magic: int, codec: str, frame) -> int:
    """The sum of the bounds of the frames in ``view``: ``frame(view, pos)`` reads the frame of
    ``magic`` at ``pos`` and gives (where it ends, its bound). Skippable frames, whose form lz4
    and zstd share, add nothing."""
    pos, total = 0, 0
    while pos < len(view):
        found = _U32.unpack_from(view, pos)[0]
        if found & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
            pos += 8 + _U32.unpack_from(view, pos + 4)[0]
            continue
        if found != magic:
            raise InvalidBatch(f"{codec} records do not start with a frame")
        pos, bound = frame(view, pos)
        total += bound
        if pos > len(view):
            raise InvalidBatch(f"{codec} frame overruns the records")
    return total


def _lz4_frame(view: memoryview, pos: int) -> tuple[int, int]:
    total = 0
    flags, bd = view[pos + 4], view[pos + 5]
    block_max = _LZ4_BLOCK_MAX.get((bd >> 4) & 7)
    if flags >> 6 != 1 or block_max is None:
        raise InvalidBatch("lz4 frame descriptor is invalid")
    pos += 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0) + 1  # sizes, dict id, checksum
    block_checksum = 4 if flags & 0x10 else 0
    while True:
        size = _U32.unpack_from(view, pos)[0]
        pos += 4
        if size == 0:  # end mark
            break
        stored = size & 0x7FFFFFFF
        if size & 0x80000000 and stored > block_max:
            raise InvalidBatch("lz4 block larger than its frame's maximum")
        total += stored if size & 0x80000000 else block_max
        pos += stored + block_checksum
    pos += 4 if flags & 0x04 else 0  # content checksum
    return pos, total


def _lz4_bound(view: memoryview) -> int:
    return _frames_bound(view, _LZ4_MAGIC, "lz4", _lz4_frame)


def _zstd_frame(view: memoryview, pos: int) -> tuple[int, int]:
    total = 0
    descriptor = view[pos + 4]
    pos += 5
    fcs_flag, single = descriptor >> 6, descriptor & 0x20
    if descriptor & 0x08:
        raise InvalidBatch("zstd frame header has its reserved bit set")
    window = 0
    if not single:
        wd = view[pos]
        pos += 1
        base = 1 << (10 + (wd >> 3))
        window = base + (base >> 3) * (wd & 7)
    pos += (0, 1, 2, 4)[descriptor & 3]  # dictionary id
    fcs_size = (1 if single else 0, 2, 4, 8)[fcs_flag]
    if single:
        window = int.from_bytes(view[pos:pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
    pos += fcs_size
    block_max = min(window, _ZSTD_BLOCK_MAX)
    while True:
        header = int.from_bytes(view[pos:pos + 3], "little")
        if pos + 3 > len(view):
            raise InvalidBatch("zstd frame ends inside a block header")
        pos += 3
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise InvalidBatch("zstd block of the reserved type")
        if kind in (0, 1) and size > block_max:
            raise InvalidBatch("zstd block larger than its frame's maximum")
        total += size if kind in (0, 1) else block_max
        pos += 1 if kind == 1 else size
        if last:
            break
    pos += 4 if descriptor & 0x04 else 0  # content checksum
    return pos, total


def _zstd_bound(view: memoryview) -> int:
    return _frames_bound(view, _ZSTD_MAGIC, "zstd", _zstd_frame)


__all__ = ["MAX_DECOMPRESSED", "RecordsTooLarge", "check_decompressed", "decompress", "decompressed_bound"]
