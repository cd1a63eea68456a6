"""Committed records of a topic as rows, without Spark (the Spark source calls these).

Offsets resolve exactly as a broker resolves them (``storage/reader.py``: ``idx``
groups, then ``tail.pending``; only what the tail says is committed), and stored
entries are opened with the same code the cross-protocol paths use
(``pulsar.codec.entry``, ``kafka.codec.records``, ``topics.convert``).

A row is ``(topic, partition, offset, publish_time, event_time, key, value,
properties, producer_name)``; ``partition`` is -1 for a non-partitioned topic.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

from ..kafka.codec.records import decode_records
from ..topics.convert import PRODUCER_NAME as KAFKA_PRODUCER_NAME
from ..topics.convert import key_from_pulsar
from ..ledger.entry import EntryFlags, EntryFormat, decode_entry
from ..ledger.naming import TopicName
from ..meta import MetadataStore
from ..objstore import ObjectStore
from ..pulsar.codec import entry_messages, split_entry
from ..pulsar.server.topics import partitioned_key
from ..storage import records
from ..storage.cache import BlockCache, TailCache
from ..storage.reader import StreamReader
from ..storage.records import Tail

ROW_FIELDS = ("topic", "partition", "offset", "publish_time", "event_time", "key", "value", "properties",
              "producer_name")
LOG_APPEND_TIME = 0x08  # Kafka batch attribute: timestamps are the broker's (max_timestamp)
_READ_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class StreamRange:
    """The committed offsets ``[start, end)`` of one topic partition's stream."""

    topic: str  # the topic as named by the user, fully qualified (partitioned: the base topic)
    partition: int  # -1 for a non-partitioned topic
    stream: str  # stream name
    stream_id: int
    start: int
    end: int


async def partitions(meta: MetadataStore, topic: str) -> list[tuple[str, int, str]]:
    """(topic, partition, stream name) of every partition of ``topic`` (short names accepted)."""
    name = TopicName.parse(topic)
    rec = None if name.partition_index >= 0 else await meta.get(partitioned_key(name))
    if rec is None:
        return [(str(name), -1, str(name))]
    count = json.loads(rec.value)["partitions"]
    return [(str(name), i, str(name.partition(i))) for i in range(count)]


async def stream_range(meta: MetadataStore, topic: str, partition: int, stream: str) -> StreamRange | None:
    """Committed bounds of a stream: ``start`` (trim) to ``tail.next``; None if it does not exist."""
    rec = await meta.get(records.name_key(stream))
    if rec is None:
        return None
    stream_id = records.decode(rec.value)["id"]
    key = records.stream_partition(stream_id)
    start_rec = await meta.get(records.start_key(stream_id), partition_key=key)
    tail_rec = await meta.get(records.tail_key(stream_id), partition_key=key)
    start = records.decode(start_rec.value).get("start", 0) if start_rec is not None else 0
    end = Tail.decode(tail_rec.value).next if tail_rec is not None else 0
    return StreamRange(topic, partition, stream, stream_id, start, max(start, end))


class TopicNotFound(LookupError):
    """The topic does not exist: it is neither a partitioned topic nor a stream."""


async def topic_ranges(meta: MetadataStore, topic: str, *, must_exist: bool = False) -> list[StreamRange]:
    """Committed bounds of every partition of ``topic`` that has a stream.

    ``must_exist``: raise ``TopicNotFound`` (naming the topic) if the topic does not
    exist. A partitioned topic exists from its creation, before its partitions hold a
    stream (then the list is empty).
    """
    parts = await partitions(meta, topic)
    out = []
    for name, partition, stream in parts:
        bounds = await stream_range(meta, name, partition, stream)
        if bounds is not None:
            out.append(bounds)
    if must_exist and not out and parts[0][1] < 0:
        raise TopicNotFound(f"topic {parts[0][0]} does not exist")
    return out


def _time(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms > 0 else None


def _pulsar_rows(topic: str, partition: int, base: int, body: memoryview) -> Iterator[tuple]:
    meta, payload = split_entry(body)
    if meta.HasField("marker_type") or meta.encryption_keys:
        return  # markers are not records; encrypted payloads cannot be split (their offsets are a gap)
    publish = _time(meta.publish_time)
    for m in entry_messages(meta, payload):
        single = m.metadata
        props = {p.key: p.value for p in single.properties}
        value = None if single.null_value else bytes(m.payload)
        yield (topic, partition, base + max(m.index, 0), publish, _time(single.event_time), key_from_pulsar(single),
               value, props, meta.producer_name)


def _kafka_rows(topic: str, partition: int, base: int, body: memoryview) -> Iterator[tuple]:
    header, batch = decode_records(body)
    publish = _time(header.max_timestamp if header.max_timestamp > 0 else header.base_timestamp)
    log_time = bool(header.attributes & LOG_APPEND_TIME)
    for r in batch:
        props = {k: (None if v is None else v.decode("utf-8", "replace")) for k, v in r.headers}
        event = publish if log_time else _time(r.timestamp)
        yield (topic, partition, base + r.offset_delta, publish, event, r.key, r.value, props, KAFKA_PRODUCER_NAME)


def entry_rows(topic: str, partition: int, base: int, data: bytes | memoryview) -> Iterator[tuple]:
    """The rows of one stored entry whose first record is at offset ``base``."""
    header, body = decode_entry(data)
    if header.flags & EntryFlags.CONTROL:
        return iter(())  # Kafka transaction markers, Pulsar markers: offsets without records
    if header.format == EntryFormat.KAFKA:
        return _kafka_rows(topic, partition, base, body)
    return _pulsar_rows(topic, partition, base, body)


async def read_rows(meta: MetadataStore, objects: ObjectStore, r: StreamRange) -> AsyncIterator[list[tuple]]:
    """The rows of offsets ``[r.start, r.end)``, a list per read (about 8 MiB of entries)."""
    reader = StreamReader(meta, objects, TailCache(), BlockCache(_READ_BYTES * 2))
    offset = r.start
    while offset < r.end:
        entries = await reader.read(r.stream_id, offset, r.end, _READ_BYTES)
        if not entries:
            break
        batch = [row for e in entries for row in entry_rows(r.topic, r.partition, e.base_offset, e.data)
                 if r.start <= row[2] < r.end]
        offset = entries[-1].end_offset
        yield batch
