"""Byte layout of the records in a replica's segment files (sans-io: bytes in, records out).

A segment file is preallocated (zeros) and filled with records back to back from offset 0::

    record := magic "NRWR" | header_crc u32 | type u8 | version u8 | block_len u16 | key_len u16
              | reserved u16 | data_len u32 | data_crc u32 | block | key | data

All integers are big-endian. ``header_crc`` is the crc32c of everything from ``type`` through
``key``, ``data_crc`` that of ``data``: the data is checksummed once, and its checksum is also
what tells a writer's retry (same bytes) from a conflicting append. Types: ENTRY (block, key,
data), FENCE (block) and DROP (block).

The logical end of a segment is the first position that holds no valid record. What follows
it decides what it was: zeros only (never written), or a torn write of a record that was never
acknowledged. A valid record further on means the bad bytes sit in the middle of the log:
corruption, reported and skipped (``Scan.damaged``), never silently taken for the end.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field

import crc32c

MAGIC = b"NRWR"
VERSION = 1
ENTRY, FENCE, DROP = 1, 2, 3
TYPES = (ENTRY, FENCE, DROP)

_HEADER = struct.Struct(">4sIBBHHHII")
HEADER_SIZE = _HEADER.size
_CRC_FROM = 8  # header_crc covers the header from here on, then block and key
MAX_NAME_BYTES = 0xFFFF
MAX_DATA_BYTES = 0xFFFFFFFF
_ZEROS = bytes(1 << 20)

Buffer = bytes | bytearray | memoryview | mmap.mmap


def data_crc(chunks) -> int:
    crc = 0
    for chunk in chunks:
        crc = crc32c.crc32c(chunk, crc)
    return crc


def encode_head(record_type: int, block: bytes, key: bytes, data_len: int, crc: int) -> bytes:
    """Header, block and key of a record; its data follows them as it is."""
    if len(block) > MAX_NAME_BYTES or len(key) > MAX_NAME_BYTES:
        raise ValueError("block and key are at most 65535 bytes of UTF-8")
    if data_len > MAX_DATA_BYTES:
        raise ValueError(f"an entry is at most {MAX_DATA_BYTES} bytes")
    fields = _HEADER.pack(MAGIC, 0, record_type, VERSION, len(block), len(key), 0, data_len, crc)
    head_crc = crc32c.crc32c(key, crc32c.crc32c(block, crc32c.crc32c(memoryview(fields)[_CRC_FROM:])))
    return fields[:4] + head_crc.to_bytes(4, "big") + fields[_CRC_FROM:] + block + key


def record_size(block: bytes, key: bytes, data_len: int) -> int:
    return HEADER_SIZE + len(block) + len(key) + data_len


@dataclass(frozen=True, slots=True)
class Record:
    """One record found in a segment; ``data_ok`` is False when its data fails its checksum."""

    type: int
    block: str
    key: str
    position: int  # of the record
    data_position: int
    data_len: int
    data_crc: int
    data_ok: bool

    @property
    def end(self) -> int:
        return self.data_position + self.data_len


@dataclass(slots=True)
class Scan:
    """What a segment holds: its records in order, its logical end, and the damage found."""

    records: list[Record] = field(default_factory=list)
    end: int = 0
    clean_tail: bool = True  # zeros only after ``end``: the next record may be written there
    damaged: list[tuple[int, int]] = field(default_factory=list)  # byte ranges skipped mid-segment


def parse(view: memoryview, position: int) -> Record | None:
    """The record at ``position`` if its header is valid (its data may still be bad), else None."""
    if position + HEADER_SIZE > len(view):
        return None
    magic, head_crc, rtype, version, block_len, key_len, _, data_len, crc = _HEADER.unpack_from(view, position)
    if magic != MAGIC or version != VERSION or rtype not in TYPES:
        return None
    names = position + HEADER_SIZE
    data_position = names + block_len + key_len
    if data_position + data_len > len(view):
        return None
    if crc32c.crc32c(view[position + _CRC_FROM:data_position]) != head_crc:
        return None
    try:
        block = str(view[names:names + block_len], "utf-8")
        key = str(view[names + block_len:data_position], "utf-8")
    except UnicodeDecodeError:
        return None
    data_ok = crc32c.crc32c(view[data_position:data_position + data_len]) == crc
    return Record(rtype, block, key, position, data_position, data_len, crc, data_ok)


def _next_valid(buf: Buffer, view: memoryview, start: int) -> int | None:
    """Where the next fully valid record starts at or after ``start``, if anywhere."""
    position = buf.find(MAGIC, start)
    while position != -1:
        record = parse(view, position)
        if record is not None and record.data_ok:
            return position
        position = buf.find(MAGIC, position + 1)
    return None


def _zeros_from(view: memoryview, start: int) -> bool:
    for position in range(start, len(view), len(_ZEROS)):
        chunk = view[position:position + len(_ZEROS)]
        if chunk != _ZEROS[:len(chunk)]:
            return False
    return True


def scan(buf: Buffer) -> Scan:
    """Every record of a segment's bytes (``buf`` supports ``find``: bytes or an mmap)."""
    result = Scan()
    with memoryview(buf) as view:
        position = 0
        while True:
            record = parse(view, position)
            if record is not None and record.data_ok:
                result.records.append(record)
                position = record.end
                continue
            resume = _next_valid(buf, view, position + 1)
            if resume is None:
                break
            if record is not None:  # its header holds: the entry is known, and known to be bad
                result.records.append(record)
            result.damaged.append((position, resume))
            position = resume
        result.end = position
        result.clean_tail = _zeros_from(view, position)
    return result
