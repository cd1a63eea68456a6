"""Produce requests read without copying their record batches.

``kio``'s reader copies every ``records`` field into a new ``bytes``; for Produce those
are nearly all of the bytes a broker receives. This reader builds the same ``kio``
objects (checked against ``kio`` in tests, every supported version) with ``records`` as
a memoryview of the frame, so a produced batch is first copied when it becomes a stored
entry. Every length and count is checked against the bytes left before it is used.

Layout (v3-v8 legacy encodings, v9+ flexible: compact lengths and tagged fields)::

    header: api_key i16 | api_version i16 | correlation_id i32 | client_id nullable string(i16)
            [| tagged fields]
    body:   transactional_id nullable string | acks i16 | timeout_ms i32
            | topic_data [name string (v3-v12) | topic_id uuid (v13+)
                | partition_data [index i32 | records nullable bytes [| tags]] [| tags]]
            [| tags]
"""

from __future__ import annotations

import datetime
import functools
import struct
import uuid

from .schemas import MalformedRequest, nested, request_schema

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
_ACKS_TIMEOUT = struct.Struct(">hi")
PRODUCE = 0
TOPIC_IDS_FROM = 13  # topics named by id (KIP-516)


class _Reader:
    __slots__ = ("view", "pos", "end", "flexible")

    def __init__(self, view: memoryview, pos: int, flexible: bool) -> None:
        self.view, self.pos, self.end, self.flexible = view, pos, len(view), flexible

    def take(self, n: int, what: str) -> int:
        """Reserve ``n`` bytes; returns where they start."""
        start = self.pos
        if n < 0 or start + n > self.end:
            raise MalformedRequest(f"Produce: {what} of {n} bytes at {start} overruns the frame ({self.end} bytes)")
        self.pos = start + n
        return start

    def fixed(self, st: struct.Struct, what: str) -> tuple:
        return st.unpack_from(self.view, self.take(st.size, what))

    def uvarint(self) -> int:
        shift = value = 0
        view, pos, end = self.view, self.pos, self.end
        while True:
            if pos >= end:
                raise MalformedRequest("Produce: frame ends inside a varint")
            b = view[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return value
            shift += 7
            if shift > 35:
                raise MalformedRequest("Produce: varint too long")

    def length(self, legacy: struct.Struct) -> int:
        """A length or count: -1 for null."""
        if self.flexible:
            return self.uvarint() - 1
        return self.fixed(legacy, "length")[0]

    def string(self, *, nullable: bool, legacy: bool = False) -> str | None:
        n = self.fixed(_I16, "length")[0] if legacy else self.length(_I16)
        if n < 0:
            if not nullable:
                raise MalformedRequest(f"Produce: null string at {self.pos} in a field that is not nullable")
            return None
        start = self.take(n, "string")
        try:
            return str(self.view[start:start + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest(f"Produce: string at {start} is not UTF-8: {exc}") from None

    def count(self) -> int:
        n = self.length(_I32)
        if n < 0:
            raise MalformedRequest(f"Produce: null array at {self.pos} in a field that is not nullable")
        if n > self.end - self.pos:  # each element takes at least one byte
            raise MalformedRequest(f"Produce: array of {n} elements at {self.pos} overruns the frame")
        return n

    def records(self) -> memoryview | None:
        n = self.length(_I32)
        if n < 0:
            return None
        start = self.take(n, "records")
        return self.view[start:start + n]

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # the tag: Produce defines none, so every one is skipped
                self.take(self.uvarint(), "tagged field")


@functools.lru_cache(maxsize=None)
def _classes(version: int) -> tuple[type, type, type]:
    cls = request_schema(PRODUCE, version)
    return cls, nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")


def decode_produce(frame: bytes | memoryview) -> tuple[str | None, object]:
    """(client id, ``kio`` ProduceRequest) of a whole Produce frame (no size prefix); each
    partition's ``records`` is a view of ``frame``. Raises MalformedRequest."""
    view = memoryview(frame)
    if len(view) < _HEAD.size:
        raise MalformedRequest("frame shorter than a request header")
    _, version, _ = _HEAD.unpack_from(view, 0)
    cls, topic_cls, part_cls = _classes(version)
    r = _Reader(view, _HEAD.size, cls.__flexible__)
    client_id = r.string(nullable=True, legacy=True)  # legacy in header v2 too
    r.skip_tags()
    transactional_id = r.string(nullable=True)
    acks, timeout_ms = r.fixed(_ACKS_TIMEOUT, "acks and timeout")
    topics = []
    by_id = version >= TOPIC_IDS_FROM
    for _ in range(r.count()):
        if by_id:
            start = r.take(16, "topic id")
            raw_id = bytes(r.view[start:start + 16])
            named = {"topic_id": uuid.UUID(bytes=raw_id) if any(raw_id) else None}  # zeros: no id, as kio reads it
        else:
            named = {"name": r.string(nullable=False)}
        parts = []
        for _ in range(r.count()):
            (index,) = r.fixed(_I32, "partition index")
            parts.append(part_cls(index=index, records=r.records()))
            r.skip_tags()
        r.skip_tags()
        topics.append(topic_cls(partition_data=tuple(parts), **named))
    r.skip_tags()
    return client_id, cls(transactional_id=transactional_id, acks=acks,
                          timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=tuple(topics))


__all__ = ["PRODUCE", "TOPIC_IDS_FROM", "decode_produce"]
