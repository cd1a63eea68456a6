"""Payload compression as Pulsar clients put it on the wire.

Only the cross-protocol path (e.g. Kafka <-> Pulsar) should call this; a
Pulsar entry forwarded to Pulsar consumers stays compressed and opaque.

Wire formats, matching the reference clients:

* LZ4    — one raw LZ4 *block* (no frame, no size prefix).
* ZLIB   — a zlib stream (RFC 1950 header + deflate + adler32).
* ZSTD   — one zstd frame.
* SNAPPY — raw snappy block (no framing format).

The uncompressed size travels in ``MessageMetadata.uncompressed_size``; LZ4
needs it to decompress, and every codec is checked against it.
"""

from __future__ import annotations

import zlib

import cramjam

from . import PulsarApi_pb2 as pb
from .errors import DecompressionFailed, UnsupportedCompression
from .frames import Buffer

NONE = pb.NONE
LZ4 = pb.LZ4
ZLIB = pb.ZLIB
ZSTD = pb.ZSTD
SNAPPY = pb.SNAPPY

# The declared size is the peer's word: cap what we allocate for it.
DEFAULT_MAX_UNCOMPRESSED_SIZE = 64 * 1024 * 1024


def compress(codec: int, data: Buffer) -> bytes:
    """Compress ``data`` with a ``CompressionType`` codec; NONE returns it as bytes."""
    if codec == NONE:
        return bytes(data)
    if codec == LZ4:
        return bytes(cramjam.lz4.compress_block(data, store_size=False))
    if codec == ZLIB:
        return zlib.compress(data)
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    raise UnsupportedCompression(f"compression type {codec}")


def decompress(
    codec: int,
    data: Buffer,
    uncompressed_size: int,
    *,
    max_size: int = DEFAULT_MAX_UNCOMPRESSED_SIZE,
) -> Buffer:
    """Decompress ``data`` to exactly ``uncompressed_size`` bytes.

    Raises DecompressionFailed on corrupt input or a size mismatch, and
    UnsupportedCompression for an unknown codec. NONE returns ``data``.
    """
    if codec == NONE:
        return data
    if codec not in (LZ4, ZLIB, ZSTD, SNAPPY):
        raise UnsupportedCompression(f"compression type {codec}")
    if not 0 <= uncompressed_size <= max_size:
        raise DecompressionFailed(f"declared uncompressed size {uncompressed_size} outside 0..{max_size}")
    if codec == ZLIB:
        return _inflate(data, uncompressed_size)
    # One spare byte lets us notice data that decompresses to *more* than
    # declared instead of silently truncating it.
    out = bytearray(uncompressed_size + 1)
    try:
        if codec == LZ4:
            written = cramjam.lz4.decompress_block_into(data, out)
        elif codec == ZSTD:
            written = cramjam.zstd.decompress_into(data, out)
        else:
            written = cramjam.snappy.decompress_raw_into(data, out)
    except cramjam.DecompressionError as exc:
        raise DecompressionFailed(f"{pb.CompressionType.Name(codec)}: {exc}") from None
    if written != uncompressed_size:
        raise DecompressionFailed(
            f"{pb.CompressionType.Name(codec)}: got {written} bytes, metadata says {uncompressed_size}"
        )
    del out[uncompressed_size:]
    return out


def _inflate(data: Buffer, size: int) -> bytes:
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(data, size + 1)
    except zlib.error as exc:
        raise DecompressionFailed(f"ZLIB: {exc}") from None
    if len(out) != size or not inflater.eof:
        raise DecompressionFailed(f"ZLIB: got {len(out)}+ bytes, metadata says {size}")
    return out


__all__ = ["DEFAULT_MAX_UNCOMPRESSED_SIZE", "compress", "decompress"]
