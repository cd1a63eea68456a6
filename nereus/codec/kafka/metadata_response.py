"""Metadata responses encoded by hand: an answer for every topic of a big cluster lists every
partition, and ``kio``'s generic writer (a walk of each entity's fields) is most of its cost.

The layout follows Kafka's MetadataResponse v1-v13 (tests compare it with ``kio``'s, byte
for byte, in every version)::

    header: correlation_id i32 [| tags]                        (header v1 in flexible versions, v9+)
    body:   throttle_time_ms i32 (v3+)
            | brokers [node_id i32 | host string | port i32 | rack nullable string [| tags]]
            | cluster_id nullable string (v2+) | controller_id i32
            | topics [error_code i16 | name string (nullable v12+) | topic_id uuid (v10+)
                | is_internal bool | partitions [error_code i16 | partition_index i32 | leader_id i32
                | leader_epoch i32 (v7+) | replica_nodes [i32] | isr_nodes [i32]
                | offline_replicas [i32] (v5+) [| tags]]
                | topic_authorized_operations i32 (v8+) [| tags]]
            | cluster_authorized_operations i32 (v8-v10) | error_code i16 (v13+) [| tags]

Metadata responses carry no tagged fields of their own: in flexible versions every tag
section is empty.
"""

from __future__ import annotations

import datetime
import functools
import struct

from .writers import length, string

FLEXIBLE_FROM = 9
_I32 = struct.Struct(">i")
_PARTITION_V7 = struct.Struct(">hiii")  # error_code, partition_index, leader_id, leader_epoch
_PARTITION = struct.Struct(">hii")  # error_code, partition_index, leader_id
_TOPIC_HEAD = struct.Struct(">h")


def encode(correlation_id: int, version: int, body) -> bytes:
    """The whole frame (size prefix included)."""
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(b"\0\0\0\0")
    out += _I32.pack(correlation_id)
    if flexible:
        out.append(0)  # header tags
    if version >= 3:
        out += _I32.pack(_millis(body.throttle_time))
    length(out, len(body.brokers), flexible)
    for broker in body.brokers:
        out += _I32.pack(broker.node_id)
        string(out, broker.host, flexible)
        out += _I32.pack(broker.port)
        string(out, broker.rack, flexible)
        if flexible:
            out.append(0)
    if version >= 2:
        string(out, body.cluster_id, flexible)
    out += _I32.pack(body.controller_id)
    length(out, len(body.topics), flexible)
    for topic in body.topics:
        _topic(out, topic, version, flexible)
    if 8 <= version <= 10:
        out += _I32.pack(body.cluster_authorized_operations)
    if version >= 13:
        out += _TOPIC_HEAD.pack(body.error_code)
    if flexible:
        out.append(0)
    _I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _topic(out: bytearray, topic, version: int, flexible: bool) -> None:
    out += _TOPIC_HEAD.pack(topic.error_code)
    string(out, topic.name, flexible)
    if version >= 10:
        out += topic.topic_id.bytes
    out.append(1 if topic.is_internal else 0)
    length(out, len(topic.partitions), flexible)
    with_epoch, with_offline = version >= 7, version >= 5
    for part in topic.partitions:
        if with_epoch:
            out += _PARTITION_V7.pack(part.error_code, part.partition_index, part.leader_id, part.leader_epoch)
        else:
            out += _PARTITION.pack(part.error_code, part.partition_index, part.leader_id)
        _nodes(out, part.replica_nodes, flexible)
        _nodes(out, part.isr_nodes, flexible)
        if with_offline:
            _nodes(out, part.offline_replicas, flexible)
        if flexible:
            out.append(0)
    if version >= 8:
        out += _I32.pack(topic.topic_authorized_operations)
    if flexible:
        out.append(0)


def _nodes(out: bytearray, nodes, flexible: bool) -> None:
    out += _node_list(tuple(nodes), flexible)


@functools.lru_cache(maxsize=4096)
def _node_list(nodes: tuple[int, ...], flexible: bool) -> bytes:
    """An array of node ids: the same few lists recur in every partition of an answer."""
    buf = bytearray()
    length(buf, len(nodes), flexible)
    buf += struct.pack(f">{len(nodes)}i", *nodes)
    return bytes(buf)


def _millis(value) -> int:
    if isinstance(value, datetime.timedelta):
        return (value.days * 86_400 + value.seconds) * 1000 + value.microseconds // 1000
    return int(value)


__all__ = ["encode"]
