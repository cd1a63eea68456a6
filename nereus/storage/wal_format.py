"""Byte layout of a WAL object (sans-io: bytes in, structures out).

A WAL object carries one slice per stream that appended during one flush::

    object  := header slice* directory
    header  := magic "NRWL" | version u16 | flags u16 | slice_count u32 | reserved u32
    slice   := stream_id u64 | base_hint u64 | entry_count u32 | record_count u64
               | data_len u32 | crc32c(base_hint, data) u32 | data
    data    := (record_count u32 | entry_len u32 | entry bytes)*
    directory := (stream_id u64 | slice_pos u64 | slice_len u32)* | slice_count u32
               | crc32c(directory entries) u32 | magic "NRWE"

All integers are big-endian. The object holds no offsets: offsets are assigned by
the metadata plane when each slice commits, and live only in the offset index.
``base_hint`` is the offset the writer expected the slice to get; it only tells the
garbage collector where to look in the index after a writer crashed.
A slice is addressed by its byte range, so a reader fetches exactly one slice with
one ranged GET and checks its checksum before serving anything from it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Sequence

import crc32c

from .errors import CorruptObject

MAGIC = b"NRWL"
END_MAGIC = b"NRWE"
FORMAT_VERSION = 1

_HEADER = struct.Struct(">4sHHII")
_SLICE_HEADER = struct.Struct(">QQIQII")
_ENTRY_HEADER = struct.Struct(">II")
_DIR_ENTRY = struct.Struct(">QQI")
_U64 = struct.Struct(">Q")
_DIR_TRAILER = struct.Struct(">II4s")

HEADER_SIZE = _HEADER.size
SLICE_HEADER_SIZE = _SLICE_HEADER.size
ENTRY_HEADER_SIZE = _ENTRY_HEADER.size
MAX_ENTRY_BYTES = (1 << 31) - 1
MAX_RECORDS_PER_ENTRY = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class SliceLayout:
    """Where one stream's slice sits in an encoded object."""

    stream_id: int
    position: int
    length: int
    entry_count: int
    record_count: int
    base_hint: int = 0


@dataclass(frozen=True, slots=True)
class EncodedObject:
    chunks: list[bytes | memoryview]  # write with writev / put of a chunk list
    size: int
    slices: list[SliceLayout]


def encode_object(slices: Sequence[tuple[int, Sequence[tuple[int, bytes | memoryview]]]],
                  base_hints: Sequence[int] | None = None) -> EncodedObject:
    """Lay out ``[(stream_id, [(record_count, entry), ...]), ...]`` as one object.

    Entries are referenced, not copied: the result is a list of chunks.
    """
    chunks: list[bytes | memoryview] = [_HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(slices), 0)]
    position = HEADER_SIZE
    layouts: list[SliceLayout] = []
    for i, (stream_id, entries) in enumerate(slices):
        hint = base_hints[i] if base_hints is not None else 0
        entry_chunks: list[bytes | memoryview] = []
        crc = crc32c.crc32c(_U64.pack(hint))  # the hint is covered too: no byte goes unchecked
        data_len = 0
        records = 0
        for record_count, entry in entries:
            header = _ENTRY_HEADER.pack(record_count, len(entry))
            crc = crc32c.crc32c(entry, crc32c.crc32c(header, crc))
            entry_chunks.append(header)
            entry_chunks.append(entry)
            data_len += ENTRY_HEADER_SIZE + len(entry)
            records += record_count
        chunks.append(_SLICE_HEADER.pack(stream_id, hint, len(entries), records, data_len, crc))
        chunks.extend(entry_chunks)
        length = SLICE_HEADER_SIZE + data_len
        layouts.append(SliceLayout(stream_id, position, length, len(entries), records, hint))
        position += length
    directory = b"".join(_DIR_ENTRY.pack(s.stream_id, s.position, s.length) for s in layouts)
    chunks.append(directory)
    chunks.append(_DIR_TRAILER.pack(len(layouts), crc32c.crc32c(directory), END_MAGIC))
    size = position + len(directory) + _DIR_TRAILER.size
    return EncodedObject(chunks, size, layouts)


def decode_slice(data: bytes | memoryview, stream_id: int) -> list[tuple[int, memoryview]]:
    """Entries ``[(record_count, bytes), ...]`` of one slice, after checking it.

    Raises CorruptObject if the slice belongs to another stream, is truncated, or
    fails its checksum.
    """
    view = memoryview(data)
    if len(view) < SLICE_HEADER_SIZE:
        raise CorruptObject(f"slice truncated: {len(view)} bytes")
    sid, hint, entry_count, record_count, data_len, crc = _SLICE_HEADER.unpack_from(view, 0)
    if sid != stream_id:
        raise CorruptObject(f"slice belongs to stream {sid}, expected {stream_id}")
    body = view[SLICE_HEADER_SIZE:]
    if len(body) != data_len:
        raise CorruptObject(f"slice data is {len(body)} bytes, header says {data_len}")
    if crc32c.crc32c(body, crc32c.crc32c(_U64.pack(hint))) != crc:
        raise CorruptObject(f"slice checksum mismatch for stream {stream_id}")
    entries: list[tuple[int, memoryview]] = []
    pos = 0
    records = 0
    for _ in range(entry_count):
        if pos + ENTRY_HEADER_SIZE > data_len:
            raise CorruptObject("entry header past the end of the slice")
        count, length = _ENTRY_HEADER.unpack_from(body, pos)
        pos += ENTRY_HEADER_SIZE
        if pos + length > data_len:
            raise CorruptObject("entry past the end of the slice")
        entries.append((count, body[pos : pos + length]))
        pos += length
        records += count
    if pos != data_len or records != record_count:
        raise CorruptObject("slice entry counts do not match its header")
    return entries


def decode_directory(data: bytes | memoryview) -> list[SliceLayout]:
    """The slice directory of a whole object (used by repair tools and the pipeline)."""
    view = memoryview(data)
    if len(view) < HEADER_SIZE + _DIR_TRAILER.size:
        raise CorruptObject("object too small")
    magic, version, _flags, slice_count, _ = _HEADER.unpack_from(view, 0)
    if magic != MAGIC or version != FORMAT_VERSION:
        raise CorruptObject("not a WAL object (bad magic or version)")
    count, crc, end_magic = _DIR_TRAILER.unpack_from(view, len(view) - _DIR_TRAILER.size)
    if end_magic != END_MAGIC or count != slice_count:
        raise CorruptObject("bad object trailer")
    dir_start = len(view) - _DIR_TRAILER.size - count * _DIR_ENTRY.size
    if dir_start < HEADER_SIZE:
        raise CorruptObject("directory overlaps the header")
    directory = view[dir_start : len(view) - _DIR_TRAILER.size]
    if crc32c.crc32c(directory) != crc:
        raise CorruptObject("directory checksum mismatch")
    layouts = []
    for i in range(count):
        sid, pos, length = _DIR_ENTRY.unpack_from(directory, i * _DIR_ENTRY.size)
        if pos < HEADER_SIZE or length < SLICE_HEADER_SIZE or pos + length > dir_start:
            raise CorruptObject(f"slice range [{pos}, +{length}) is outside the object's slice area")
        _, hint, entry_count, records, _, _ = _SLICE_HEADER.unpack_from(view, pos)
        layouts.append(SliceLayout(sid, pos, length, entry_count, records, hint))
    return layouts

