"""A pass over a request frame that checks every length and count against the bytes present.

The ``kio`` reader sizes arrays by the count the peer sends before reading any
element: a 14-byte Metadata request claiming 2**31-1 topics makes it allocate
16 GiB, and the process aborts. So before decoding, this pass walks the frame by
the same schema and refuses any array count, string or bytes length, or tagged
field size larger than what is left of the frame (every array element of the
request schemas takes at least one byte). It reads lengths only; values are
skipped, so the cost is a few microseconds per request.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import fields

from kio.serial._introspect import (EntityField, EntityTupleField, PrimitiveTupleField, classify_field,
                                    get_field_tag, get_schema_field_type, is_optional)

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_FIXED = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2, "int32": 4, "uint32": 4,
          "timedelta_i32": 4, "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
          "uuid": 16}


class LengthError(ValueError):
    """A length or count in the frame is larger than the frame."""


def check_frame(cls, data: bytes, pos: int, *, header: bool = False) -> int:
    """Walk one ``cls`` entity at ``pos``; returns the position after it. Raises LengthError."""
    return _plan(cls, header)(data, pos, len(data))


def _uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= end:
            raise LengthError("frame ends inside a varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise LengthError("varint too long")


def _need(pos: int, size: int, end: int, what: str) -> int:
    if size < 0 or pos + size > end:
        raise LengthError(f"{what} of {size} bytes at {pos} overruns the frame ({end} bytes)")
    return pos + size


def _fixed(size: int):
    def walk(data, pos, end):
        return _need(pos, size, end, "field")
    return walk


def _null(nullable: bool, what: str, pos: int) -> None:
    if not nullable:
        raise LengthError(f"null {what} at {pos} in a field that is not nullable")


def _legacy_string(width: struct.Struct, nullable: bool = True):
    def walk(data, pos, end):
        _need(pos, width.size, end, "length")
        n = width.unpack_from(data, pos)[0]
        pos += width.size
        if n == -1:
            _null(nullable, "string", pos)
            return pos
        return _need(pos, n, end, "string")
    return walk


def _compact_string(nullable: bool = True):
    def walk(data, pos, end):
        n, pos = _uvarint(data, pos, end)
        if n == 0:
            _null(nullable, "string", pos)
            return pos
        return _need(pos, n - 1, end, "string")
    return walk


def _array(element, flexible: bool, fixed: int | None, nullable: bool = True):
    def walk(data, pos, end):
        if flexible:
            n, pos = _uvarint(data, pos, end)
            n -= 1
        else:
            _need(pos, 4, end, "array length")
            n = _I32.unpack_from(data, pos)[0]
            pos += 4
        if n == -1:
            _null(nullable, "array", pos)
            return pos
        if n < 0 or n > end - pos:  # every element takes at least one byte
            raise LengthError(f"array of {n} elements at {pos} in a frame of {end} bytes")
        if fixed is not None:
            return _need(pos, n * fixed, end, "array")
        for _ in range(n):
            pos = element(data, pos, end)
        return pos
    return walk


def _nullable(entity):
    def walk(data, pos, end):
        _need(pos, 1, end, "null marker")
        marker = data[pos]
        return pos + 1 if marker == 0xFF else entity(data, pos + 1, end)
    return walk


def _field(field, flexible: bool, header: bool, tagged: bool):
    if header and field.name == "client_id":
        return _legacy_string(_I16)  # always a legacy string, even in header v2
    kind = classify_field(field)
    # Tagged fields are absent rather than null; only untagged ones are checked for nulls.
    nullable = tagged or is_optional(field)
    if isinstance(kind, (EntityField, EntityTupleField)):
        element = _plan(kind.type_, False)
        if isinstance(kind, EntityTupleField):
            return _array(element, flexible, None, nullable)
        return _nullable(element) if is_optional(field) and not tagged else element
    kafka_type = get_schema_field_type(field)
    if kafka_type in _FIXED:
        one, fixed = _fixed(_FIXED[kafka_type]), _FIXED[kafka_type]
    elif kafka_type in ("string", "bytes", "records"):
        # A null inside an array of strings is checked only where the whole field is a string.
        scalar_nullable = nullable or isinstance(kind, PrimitiveTupleField)
        one, fixed = (_compact_string(scalar_nullable) if flexible
                      else _legacy_string(_I16 if kafka_type == "string" else _I32, scalar_nullable)), None
    else:
        raise TypeError(f"no length check for Kafka type {kafka_type!r} (a schema this broker does not serve)")
    return _array(one, flexible, fixed, nullable) if isinstance(kind, PrimitiveTupleField) else one


@functools.lru_cache(maxsize=None)
def _plan(cls, header: bool):
    flexible = cls.__flexible__
    steps, tags = [], {}
    for field in fields(cls):
        tag = get_field_tag(field)
        if tag is None:
            steps.append(_field(field, flexible, header, False))
        else:
            tags[int(tag)] = _field(field, flexible, header, True)

    def walk(data, pos, end):
        for step in steps:
            pos = step(data, pos, end)
        if not flexible:
            return pos
        count, pos = _uvarint(data, pos, end)
        if count > end - pos:
            raise LengthError(f"{count} tagged fields at {pos} in a frame of {end} bytes")
        for _ in range(count):
            tag, pos = _uvarint(data, pos, end)
            size, pos = _uvarint(data, pos, end)
            stop = _need(pos, size, end, "tagged field")
            if tag in tags:
                tags[tag](data, pos, stop)  # the value cannot reach past its own size
            pos = stop
        return pos

    return walk


__all__ = ["LengthError", "check_frame"]
