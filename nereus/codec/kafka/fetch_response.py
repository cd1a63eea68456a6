"""Fetch responses encoded as a list of chunks, the record batches spliced in by reference.

``kio`` writes a whole response into one buffer, so every served byte would be copied
into it. Here the small fields are packed into short ``bytearray`` chunks and each
partition's records go out as the chunks they came as (``RecordChunks``: views of the
stored entries and the few rewritten header bytes), for ``transport.writelines``. The
layout follows Kafka's FetchResponse v4-v17 (tests compare it with ``kio``'s, byte for
byte, in every version)::

    header: correlation_id i32 [| tags]       (header v1 in flexible versions, v12+)
    body:   throttle_time_ms i32 [| error_code i16 | session_id i32 (v7+)]
            | responses [topic string (v4-v12) | topic_id uuid (v13+) | partitions [partition_index i32 | error_code i16
              | high_watermark i64 | last_stable_offset i64 | log_start_offset i64 (v5+)
              | aborted_transactions nullable [producer_id i64 | first_offset i64 [| tags]]
              | preferred_read_replica i32 (v11+) | records nullable bytes [| tags]] [| tags]] [| tags]

Flexible versions write lengths as unsigned varints of length + 1 (0: null) and end each
structure with its tagged fields (a partition's: diverging_epoch, current_leader,
snapshot_id, written only when they differ from their defaults; v16's node_endpoints are
never set here).
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
from typing import Any, Iterable

from kio.serial import entity_writer

from .writers import length, string, uvarint

FETCH = 1
FLEXIBLE_FROM = 12
TOPIC_IDS_FROM = 13  # topics named by id (KIP-516)
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_ERROR_SESSION = struct.Struct(">hi")
_PARTITION = struct.Struct(">ihqq")
_ABORTED = struct.Struct(">qq")


class RecordChunks:
    """A partition's record batches as pieces to write one after the other (never joined here).

    ``len()`` is their size in bytes, as for the ``bytes`` it stands for."""

    __slots__ = ("chunks", "size")

    def __init__(self, chunks: Iterable[bytes | bytearray | memoryview] = ()) -> None:
        self.chunks = list(chunks)
        self.size = sum(memoryview(c).nbytes for c in self.chunks)

    def extend(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        for chunk in chunks:
            self.chunks.append(chunk)
            self.size += memoryview(chunk).nbytes

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return b"".join(self.chunks)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordChunks):
            other = bytes(other)
        return isinstance(other, (bytes, bytearray, memoryview)) and bytes(self) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordChunks({len(self.chunks)} chunks, {self.size} bytes)"


def _ms(delta) -> int:
    return round(delta.total_seconds() * 1000)


@functools.lru_cache(maxsize=None)
def _tagged_fields(cls) -> tuple[tuple[int, str, Any], ...]:
    """(tag, field name, default) of a schema class's tagged fields, in tag order."""
    out = []
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append((f.metadata["tag"], f.name, default))
    return tuple(sorted(out))


@functools.lru_cache(maxsize=None)
def _writer(cls):
    return entity_writer(cls)


def _tags(buf: bytearray, obj) -> None:
    present = [(tag, getattr(obj, name)) for tag, name, default in _tagged_fields(type(obj))
               if getattr(obj, name) != default]
    uvarint(buf, len(present))
    for tag, value in present:
        if isinstance(value, tuple):  # an array of entities (v16's node_endpoints)
            head = bytearray()
            uvarint(head, len(value) + 1)
            out = io.BytesIO(head)
            out.seek(len(head))
            for item in value:
                _writer(type(item))(out, item)
        else:
            out = io.BytesIO()
            _writer(type(value))(out, value)
        data = out.getvalue()
        uvarint(buf, tag)
        uvarint(buf, len(data))
        buf += data


def encode_fetch_response(correlation_id: int, version: int, body) -> list[bytes | bytearray | memoryview]:
    """The whole response frame (size prefix included) as chunks; ``records`` may be ``bytes``,
    a memoryview, ``RecordChunks`` or None."""
    flexible = version >= FLEXIBLE_FROM
    out: list[bytes | bytearray | memoryview] = []
    buf = bytearray(8)
    _I32.pack_into(buf, 4, correlation_id)
    if flexible:
        buf.append(0)
    buf += _I32.pack(_ms(body.throttle_time))
    if version >= 7:
        buf += _ERROR_SESSION.pack(body.error_code, body.session_id)
    length(buf, len(body.responses), flexible)
    for topic in body.responses:
        if version >= TOPIC_IDS_FROM:
            buf += topic.topic_id.bytes if topic.topic_id is not None else bytes(16)
        else:
            string(buf, topic.topic, flexible)
        length(buf, len(topic.partitions), flexible)
        for p in topic.partitions:
            buf += _PARTITION.pack(p.partition_index, p.error_code, p.high_watermark, p.last_stable_offset)
            if version >= 5:
                buf += _I64.pack(p.log_start_offset)
            aborted = p.aborted_transactions
            length(buf, -1 if aborted is None else len(aborted), flexible)
            for txn in aborted or ():
                buf += _ABORTED.pack(txn.producer_id, txn.first_offset)
                if flexible:
                    buf.append(0)
            if version >= 11:
                buf += _I32.pack(p.preferred_read_replica)
            records = p.records
            length(buf, -1 if records is None else len(records), flexible)
            if records:
                out.append(buf)
                if isinstance(records, RecordChunks):
                    out += records.chunks
                else:
                    out.append(records)
                buf = bytearray()
            if flexible:
                _tags(buf, p)
        if flexible:
            buf.append(0)
    if flexible:
        _tags(buf, body)
    out.append(buf)
    _I32.pack_into(out[0], 0, sum(memoryview(c).nbytes for c in out) - 4)
    return out


__all__ = ["FETCH", "RecordChunks", "TOPIC_IDS_FROM", "encode_fetch_response"]
