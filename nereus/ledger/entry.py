"""The stored entry format shared by every protocol.

A stored entry is a small protocol-neutral header followed by the producer's
original batch bytes, untouched::

    magic "NE" | version u8 | format u8 | flags u16 | record_count u32
    | first_timestamp i64 | max_timestamp i64 | producer_id i64 | producer_epoch i16
    | reserved u16 | base_sequence i64 | last_sequence i64 | body

``format`` says what the body is:

* ``PULSAR``: from the 0x0e01 magic of a Pulsar SEND frame to its end
  (magic, crc32c, metadata size, MessageMetadata, payload). A Pulsar consumer is
  sent the body as-is after a CommandMessage; its checksum is the producer's.
* ``KAFKA``: one Kafka record batch (magic v2) as the producer sent it; only its
  base offset field is rewritten when served.

The header lets the storage-side readers (retention by time, the Spark pipeline,
the other protocol) know counts, times and producer identity without parsing
the body. All integers are big-endian.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

_HEADER = struct.Struct(">2sBBHIqqqhHqq")
HEADER_SIZE = _HEADER.size
MAGIC = b"NE"
VERSION = 1


class EntryFormat(enum.IntEnum):
    PULSAR = 1
    KAFKA = 2


class EntryFlags(enum.IntFlag):
    NONE = 0
    TRANSACTIONAL = 1
    CONTROL = 2
    COMPRESSED = 4
    BATCHED = 8
    DELAYED = 16  # carries a delivery time: dispatchers must look inside before sending


class EntryFormatError(ValueError):
    """The bytes are not a stored entry of a known format."""


@dataclass(frozen=True, slots=True)
class EntryHeader:
    format: EntryFormat
    record_count: int
    first_timestamp: int = -1
    max_timestamp: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    last_sequence: int = -1
    flags: EntryFlags = EntryFlags.NONE

    def pack(self) -> bytes:
        return _HEADER.pack(MAGIC, VERSION, self.format, self.flags, self.record_count, self.first_timestamp,
                            self.max_timestamp, self.producer_id, self.producer_epoch, 0, self.base_sequence,
                            self.last_sequence)


def encode_entry(header: EntryHeader, body: bytes | memoryview) -> list[bytes | memoryview]:
    """Chunks of a stored entry (join them, or hand the list to a writev)."""
    return [header.pack(), body]


def decode_entry(data: bytes | memoryview) -> tuple[EntryHeader, memoryview]:
    """Split a stored entry into its header and its body (a view, no copy)."""
    view = memoryview(data)
    if len(view) < HEADER_SIZE:
        raise EntryFormatError(f"entry of {len(view)} bytes is shorter than its header")
    (magic, version, fmt, flags, count, first_ts, max_ts, pid, epoch, _, base_seq,
     last_seq) = _HEADER.unpack_from(view, 0)
    if magic != MAGIC or version != VERSION:
        raise EntryFormatError("not a stored entry (bad magic or version)")
    entry_format = _FORMATS.get(fmt)
    if entry_format is None:
        raise EntryFormatError(f"unknown entry format {fmt}")
    entry_flags = _FLAGS.get(flags)
    if entry_flags is None:  # a Flag enum call costs microseconds: entries are decoded by the million
        entry_flags = _FLAGS.setdefault(flags, EntryFlags(flags))
    header = EntryHeader(entry_format, count, first_ts, max_ts, pid, epoch, base_seq, last_seq, entry_flags)
    return header, view[HEADER_SIZE:]


_FORMATS = {f.value: f for f in EntryFormat}
_FLAGS: dict[int, EntryFlags] = {}
