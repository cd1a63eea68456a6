"""Kafka record batches (magic v2): header fields, checks and offset rewriting.

The produce and fetch paths only look at the 61-byte batch header; records are
decoded (``records.py``) only where another protocol or a timestamp lookup needs
them. Layout (big-endian)::

    baseOffset i64 | batchLength i32 | partitionLeaderEpoch i32 | magic i8 | crc u32
    | attributes i16 | lastOffsetDelta i32 | baseTimestamp i64 | maxTimestamp i64
    | producerId i64 | producerEpoch i16 | baseSequence i32 | recordCount i32 | records

``batchLength`` counts the bytes after itself; the CRC-32C covers everything from
``attributes`` to the end, so the base offset and leader epoch can be rewritten
without touching it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = _HEADER.size  # 61
LOG_OVERHEAD = 12  # base offset + batch length
CRC_START = 21
MAGIC_OFFSET = 16
_BASE = struct.Struct(">q")
_EPOCH = struct.Struct(">i")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD = range(5)


class InvalidBatch(ValueError):
    """Bytes that are not a well-formed record batch v2 (Kafka's CORRUPT_MESSAGE)."""


class UnsupportedMagic(InvalidBatch):
    """A message set older than magic v2 (Kafka's UNSUPPORTED_FOR_MESSAGE_FORMAT)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    length: int  # whole batch in bytes (batchLength + 12)
    leader_epoch: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def parse_header(data: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos`` (no CRC check)."""
    if len(data) - pos < HEADER_SIZE:
        if len(data) - pos > MAGIC_OFFSET and data[pos + MAGIC_OFFSET] < 2:
            raise UnsupportedMagic(f"message format v{data[pos + MAGIC_OFFSET]} is not supported")
        raise InvalidBatch(f"{len(data) - pos} bytes are too short for a record batch header")
    (base, blen, epoch, magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq,
     count) = _HEADER.unpack_from(data, pos)
    if magic != 2:
        if magic in (0, 1):
            raise UnsupportedMagic(f"message format v{magic} is not supported")
        raise InvalidBatch(f"unknown magic {magic}")
    if blen + LOG_OVERHEAD < HEADER_SIZE:
        raise InvalidBatch(f"batch length {blen} is shorter than a batch header")
    return BatchHeader(base, blen + LOG_OVERHEAD, epoch, crc, attrs, lod, base_ts, max_ts, pid, pepoch, bseq, count)


def split_batches(records: bytes | memoryview) -> list[tuple[BatchHeader, memoryview]]:
    """Every batch of a produce request's records, CRC-checked; raises InvalidBatch.

    Kafka clients send one batch per partition, but the format allows several.
    """
    view = memoryview(records)
    out = []
    pos = 0
    while pos < len(view):
        header = parse_header(view, pos)
        end = pos + header.length
        if end > len(view):
            raise InvalidBatch(f"batch of {header.length} bytes overruns the records ({len(view) - pos})")
        if crc32c.crc32c(view[pos + CRC_START:end]) != header.crc:
            raise InvalidBatch("record batch CRC-32C mismatch")
        if header.record_count < 0 or header.last_offset_delta < 0 or \
                (header.record_count and header.record_count != header.last_offset_delta + 1 and
                 not header.control):
            raise InvalidBatch(f"record count {header.record_count} does not match last offset delta "
                               f"{header.last_offset_delta}")
        out.append((header, view[pos:end]))
        pos = end
    if not out:
        raise InvalidBatch("no record batch in the request")
    return out


def encode_batch(body: bytes, *, attributes: int, last_offset_delta: int, base_timestamp: int, max_timestamp: int,
                 record_count: int, base_offset: int = 0, leader_epoch: int = -1, producer_id: int = -1,
                 producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A whole batch: the header over ``body`` (the encoded records, compressed as ``attributes``
    says), with its batch length and CRC-32C filled in."""
    head = bytearray(_HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), leader_epoch, 2, 0, attributes,
                                  last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                                  base_sequence, record_count))
    _CRC.pack_into(head, CRC_START - 4, crc32c.crc32c(bytes(head[CRC_START:]) + body))
    return bytes(head) + body


def with_base_offset(batch: bytes | memoryview, base_offset: int, leader_epoch: int | None = None) -> bytearray:
    """A copy of the batch with its base offset (and leader epoch) set as served."""
    out = bytearray(batch)
    _BASE.pack_into(out, 0, base_offset)
    if leader_epoch is not None:
        _EPOCH.pack_into(out, 12, leader_epoch)
    return out


_ATTRS_AND_TIMES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")


def with_log_append_time(batch: bytes | memoryview, append_time_ms: int) -> tuple[BatchHeader, bytearray]:
    """The batch stamped as a broker stamps it for ``LogAppendTime``: timestamp type bit set,
    max timestamp = the append time (records then read that time), CRC recomputed."""
    out = bytearray(batch)
    (attrs,) = _ATTRS_AND_TIMES.unpack_from(out, CRC_START)
    _ATTRS_AND_TIMES.pack_into(out, CRC_START, attrs | TIMESTAMP_TYPE_MASK)
    _MAX_TIMESTAMP.pack_into(out, CRC_START + 14, append_time_ms)
    _CRC.pack_into(out, CRC_START - 4, crc32c.crc32c(bytes(out[CRC_START:])))
    return parse_header(out), out


__all__ = ["BatchHeader", "CONTROL_MASK", "GZIP", "HEADER_SIZE", "InvalidBatch", "LZ4", "NO_COMPRESSION", "SNAPPY",
           "TRANSACTIONAL_MASK", "UnsupportedMagic", "ZSTD", "encode_batch", "parse_header", "split_batches",
           "with_base_offset", "with_log_append_time"]
