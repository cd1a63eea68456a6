"""Kafka's primitive encodings for the hand-written responses (fetch_response, produce_response)."""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def uvarint(buf: bytearray, value: int) -> None:
    """An unsigned varint (flexible versions' lengths and tags)."""
    while value > 0x7F:
        buf.append((value & 0x7F) | 0x80)
        value >>= 7
    buf.append(value)


def length(buf: bytearray, n: int, flexible: bool) -> None:
    """An array's count or a bytes length; -1 is null (a compact one is written plus one)."""
    if flexible:
        uvarint(buf, n + 1)
    else:
        buf += _I32.pack(n)


def string(buf: bytearray, text: str | None, flexible: bool) -> None:
    """A (nullable) string: i16 length, or a compact length in flexible versions."""
    if text is None:
        if flexible:
            buf.append(0)
        else:
            buf += _I16.pack(-1)
        return
    data = text.encode()
    if flexible:
        uvarint(buf, len(data) + 1)
    else:
        buf += _I16.pack(len(data))
    buf += data
