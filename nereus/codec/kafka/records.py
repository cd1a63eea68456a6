"""Records inside a batch: decoding (with decompression) and building new batches.

Only the cross-protocol path and timestamp lookups decode records; the Kafka
produce/fetch path never does.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field

import cramjam

from .batch import (CONTROL_MASK, GZIP, HEADER_SIZE, LZ4, NO_COMPRESSION, SNAPPY, TRANSACTIONAL_MASK, ZSTD, BatchHeader,
                    InvalidBatch, encode_batch, parse_header)
from .inflate import MAX_DECOMPRESSED, decompress


@dataclass(slots=True)
class Record:
    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def compress(codec: int, data: bytes) -> bytes:
    if codec == NO_COMPRESSION:
        return data
    if codec == GZIP:
        return gzip.compress(data)
    if codec == SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        b = buf[pos]
        if b < 0x80:  # one byte: most deltas and short lengths
            return (b >> 1) ^ -(b & 1), pos + 1
        c = buf[pos + 1]
        if c < 0x80:  # two bytes: lengths up to 8 KiB
            v = (b & 0x7F) | (c << 7)
            return (v >> 1) ^ -(v & 1), pos + 2
    except IndexError:
        raise InvalidBatch("record ends inside a varint") from None
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise InvalidBatch("record ends inside a varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise InvalidBatch("varint too long")


def _bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise InvalidBatch("record field overruns the batch")
    return buf[pos:pos + n], pos + n


def decode_records(batch: bytes | memoryview, limit: int = MAX_DECOMPRESSED) -> tuple[BatchHeader, list[Record]]:
    """Header and records of one whole batch (decompressing as needed, to at most ``limit`` bytes)."""
    header = parse_header(batch)
    # bytes, not a view: indexing and slicing bytes is faster, and keys and values
    # become bytes the callers can keep.
    body = bytes(decompress(header.compression, memoryview(batch)[HEADER_SIZE:header.length], limit))
    records, pos = [], 0
    for _ in range(header.record_count):
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise InvalidBatch("record length overruns the batch")
        pos += 1  # attributes (unused)
        ts_delta, pos = _varint(body, pos)
        off_delta, pos = _varint(body, pos)
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        count, pos = _varint(body, pos)
        headers = []
        for _ in range(max(count, 0)):
            hkey, pos = _bytes(body, pos)
            hval, pos = _bytes(body, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
        records.append(Record(off_delta, header.base_timestamp + ts_delta, key, value, headers))
        pos = end
    return header, records


def _put_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _put_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        _put_varint(out, -1)
    else:
        _put_varint(out, len(value))
        out += value


def encode_record(record: Record, base_timestamp: int) -> bytes:
    body = bytearray(b"\x00")
    _put_varint(body, record.timestamp - base_timestamp)
    _put_varint(body, record.offset_delta)
    _put_bytes(body, record.key)
    _put_bytes(body, record.value)
    _put_varint(body, len(record.headers))
    for key, value in record.headers:
        _put_bytes(body, key.encode())
        _put_bytes(body, value)
    out = bytearray()
    _put_varint(out, len(body))
    return bytes(out + body)


def build_batch(records: list[Record], *, base_offset: int = 0, producer_id: int = -1, producer_epoch: int = -1,
                base_sequence: int = -1, codec: int = NO_COMPRESSION, leader_epoch: int = -1,
                transactional: bool = False, control: bool = False) -> bytes:
    """A record batch v2 holding ``records`` (offset deltas must be 0..n-1).

    ``control``: a control batch (its records are transaction markers), transactional
    as well, as Kafka writes them.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = min(r.timestamp for r in records)
    max_ts = max(r.timestamp for r in records)
    body = compress(codec, b"".join(encode_record(r, base_ts) for r in records))
    attributes = codec | (TRANSACTIONAL_MASK if transactional or control else 0) | (CONTROL_MASK if control else 0)
    return encode_batch(body, attributes=attributes, last_offset_delta=max(r.offset_delta for r in records),
                        base_timestamp=base_ts, max_timestamp=max_ts, record_count=len(records),
                        base_offset=base_offset, leader_epoch=leader_epoch, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence)


__all__ = ["Record", "build_batch", "compress", "decode_records", "decompress"]
