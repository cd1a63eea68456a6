"""Produce responses encoded by hand: every produced batch gets one, so ``kio``'s generic
writer (a walk of each entity's fields) costs more here than anywhere else.

The layout follows Kafka's ProduceResponse v3-v13 (tests compare it with ``kio``'s, byte
for byte, in every version)::

    header: correlation_id i32 [| tags]              (header v1 in flexible versions, v9+)
    body:   responses [name string (v3-v12) | topic_id uuid (v13+) | partition_responses [index i32 | error_code i16
              | base_offset i64 | log_append_time_ms i64 | log_start_offset i64 (v5+)
              | record_errors [batch_index i32 | batch_index_error_message nullable string
              [| tags]] (v8+) | error_message nullable string (v8+) [| tags]] [| tags]]
            | throttle_time_ms i32 [| tags]

A response whose tagged fields (v10+: a partition's current_leader, the node_endpoints)
differ from their defaults is left to ``kio``: ``encode`` returns None.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import struct

from .writers import length, string

FLEXIBLE_FROM = 9
TOPIC_IDS_FROM = 13
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_I64 = struct.Struct(">q")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def encode(correlation_id: int, version: int, body) -> bytes | None:
    """The whole frame (size prefix included), or None when ``kio`` must write it."""
    flexible = version >= FLEXIBLE_FROM
    if flexible and _has_tags(body, "node_endpoints"):
        return None
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(correlation_id)
    if flexible:
        out.append(0)  # header tags
    length(out, len(body.responses), flexible)
    for topic in body.responses:
        if version >= TOPIC_IDS_FROM:
            out += topic.topic_id.bytes if topic.topic_id is not None else bytes(16)
        else:
            string(out, topic.name, flexible)
        length(out, len(topic.partition_responses), flexible)
        for part in topic.partition_responses:
            if flexible and _has_tags(part, "current_leader"):
                return None
            out += _PARTITION.pack(part.index, part.error_code, part.base_offset, _millis(part.log_append_time))
            if version >= 5:
                out += _I64.pack(part.log_start_offset)
            if version >= 8:
                length(out, len(part.record_errors), flexible)
                for error in part.record_errors:
                    out += _I32.pack(error.batch_index)
                    string(out, error.batch_index_error_message, flexible)
                    if flexible:
                        out.append(0)
                string(out, part.error_message, flexible)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(_throttle_ms(body.throttle_time))
    if flexible:
        out.append(0)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _millis(stamp: datetime.datetime | None) -> int:
    if stamp is None:
        return -1
    delta = stamp - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _throttle_ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return (value.days * 86_400 + value.seconds) * 1000 + value.microseconds // 1000
    return int(value)


def _has_tags(entity, name: str) -> bool:
    """Whether ``entity``'s tagged field ``name`` (if its version has it) differs from its default."""
    default = _default(type(entity), name)
    return default is not _ABSENT and getattr(entity, name) != default


_ABSENT = object()


@functools.cache
def _default(cls: type, name: str):
    for field in dataclasses.fields(cls):
        if field.name == name:
            if field.default is not dataclasses.MISSING:
                return field.default
            if field.default_factory is not dataclasses.MISSING:
                return field.default_factory()
            return None
    return _ABSENT
