"""Committed records of a topic as rows, without Spark (the Spark source calls these).

Offsets resolve exactly as a broker resolves them (``storage/reader.py``: ``idx``
groups, then ``tail.pending``; only what the tail says is committed), and a record's
values come from ``record_values``, the mapping compacted objects use too.

Transactions: a range ends at the stream's last stable offset (below it every
transaction is decided), and the records of aborted transactions give no rows (the
range carries the aborted ``(pid, first, last)`` ranges read when it was planned).

A row is ``(topic, partition, offset, publish_time, event_time, key, value,
properties, producer_name)``; ``partition`` is -1 for a non-partitioned topic.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from itertools import repeat

from ..ledger.naming import TopicName
from ..meta import MetadataStore
from ..objstore import ObjectStore
from ..topics import partitioned_key
from ..storage import view
from ..transactions.stream_index import TxnView, aborted_view, read_view
from .record_values import RecordColumns, schema_version
from .wal_access import WalAccess

ROW_FIELDS = ("topic", "partition", "offset", "publish_time", "event_time", "key", "value", "properties",
              "producer_name")
_READ_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class StreamRange:
    """The committed offsets ``[start, end)`` of one topic partition's stream."""

    topic: str  # the topic as named by the user, fully qualified (partitioned: the base topic)
    partition: int  # -1 for a non-partitioned topic
    stream: str  # stream name
    stream_id: int
    start: int
    end: int  # the last stable offset when planned: nothing undecided is read
    aborted: tuple[tuple[int, int, int], ...] = ()  # (pid, first, last) of aborted transactions in range

    def txn_view(self) -> TxnView | None:
        """What ``record_values`` filters aborted records with (None: no aborted transaction in range)."""
        return aborted_view(self.aborted) if self.aborted else None


async def partitions(meta: MetadataStore, topic: str) -> list[tuple[str, int, str]]:
    """(topic, partition, stream name) of every partition of ``topic`` (short names accepted)."""
    name = TopicName.parse(topic)
    rec = None if name.partition_index >= 0 else await meta.get(partitioned_key(name))
    if rec is None:
        return [(str(name), -1, str(name))]
    count = json.loads(rec.value)["partitions"]
    return [(str(name), i, str(name.partition(i))) for i in range(count)]


async def stream_range(meta: MetadataStore, topic: str, partition: int, stream: str) -> StreamRange | None:
    """Stable bounds of a stream: ``start`` (trim) to its last stable offset (``tail.next``
    without open transactions); None if it does not exist."""
    stream_id = await view.stream_id(meta, stream)
    if stream_id is None:
        return None
    start, end = await view.bounds(meta, stream_id)  # the tail first: then the LSO is at most it
    txns = await read_view(meta, stream_id, end)
    return StreamRange(topic, partition, stream, stream_id, start, max(start, txns.lso),
                       tuple(txns.aborted(start, txns.lso)))


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


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _time(micros: int | None) -> datetime | None:
    return None if micros is None else _EPOCH + timedelta(microseconds=micros)


def _runs_of_times(micros: list[int | None]) -> Iterator[datetime | None]:
    """``_time`` of each value; a run of one value (an entry's publish time) is converted once."""
    last, converted = None, None
    for value in micros:
        if value != last:
            last, converted = value, _time(value)
        yield converted


def entry_rows(topic: str, partition: int, base: int, data: bytes | memoryview,
               aborted: TxnView | None = None) -> Iterator[tuple]:
    """The rows of one stored entry whose first record is at offset ``base`` (``record_values``);
    none if ``aborted`` says it belongs to an aborted transaction."""
    values = RecordColumns()
    values.add_entry(base, data, aborted)
    return zip(repeat(topic), repeat(partition), values.offset, _runs_of_times(values.publish),
               map(_time, values.event), values.key, values.value, values.properties, values.producer)


async def read_entries(meta: MetadataStore, objects: ObjectStore, r: StreamRange,
                       access: WalAccess | None = None) -> AsyncIterator[list]:
    """The stored entries holding offsets ``[r.start, r.end)``, a list per read (about 8 MiB);
    ``access``: how to read what is on WAL replicas, not uploaded yet (default: no credentials)."""
    async with (access or WalAccess()).reader(meta, objects, cache_bytes=_READ_BYTES * 2) as reader:
        offset = r.start
        while offset < r.end:
            entries = await reader.read(r.stream_id, offset, r.end, _READ_BYTES)
            if not entries:
                break
            offset = entries[-1].end_offset
            yield entries


async def read_rows(meta: MetadataStore, objects: ObjectStore, r: StreamRange,
                    access: WalAccess | None = None) -> AsyncIterator[list[tuple]]:
    """The rows of offsets ``[r.start, r.end)``, a list per read (about 8 MiB of entries)."""
    aborted = r.txn_view()
    async for entries in read_entries(meta, objects, r, access):
        yield [row for e in entries for row in entry_rows(r.topic, r.partition, e.base_offset, e.data, aborted)
               if r.start <= row[2] < r.end]


async def read_versioned_rows(meta: MetadataStore, objects: ObjectStore, r: StreamRange,
                              access: WalAccess | None = None) -> AsyncIterator[list[tuple[tuple, int | None]]]:
    """``read_rows`` with each row's schema version: lists of ``(row, version)``."""
    aborted = r.txn_view()
    async for entries in read_entries(meta, objects, r, access):
        batch = []
        for e in entries:
            version = schema_version(e.data)
            batch.extend((row, version)
                         for row in entry_rows(r.topic, r.partition, e.base_offset, e.data, aborted)
                         if r.start <= row[2] < r.end)
        yield batch


async def view_serves(meta: MetadataStore, r: StreamRange) -> bool:
    """Whether the stream's key view keeps what its raw records below ``r.start`` were: a Kafka
    compact topic's raw records are released below the view once it serves them to consumers."""
    from ..storage import key_view

    if r.start == 0:
        return False
    state = await key_view.state(meta, r.stream_id)
    return state.object is not None and state.horizon >= r.start


async def read_view_rows(meta: MetadataStore, objects: ObjectStore, r: StreamRange, below: int, *,
                         versioned: bool = False) -> AsyncIterator[list]:
    """The rows of offsets ``[r.start, below)`` that the stream's key view keeps (the latest record
    of each key, and keyless records), as a Kafka consumer of the compacted topic reads them; with
    ``versioned``, ``(row, schema version)`` pairs as ``read_versioned_rows`` gives."""
    from ..storage import key_view

    _, view = await key_view.load(meta, objects, r.stream_id)
    aborted = r.txn_view()
    batch: list = []
    for item in view.read(r.start, max_bytes=1 << 62):
        entry = item.entry
        if entry.base_offset >= below:
            break
        kept = {entry.base_offset + k for k in item.keep}
        version = schema_version(entry.data) if versioned else None
        for row in entry_rows(r.topic, r.partition, entry.base_offset, entry.data, aborted):
            if row[2] in kept and r.start <= row[2] < below:
                batch.append((row, version) if versioned else row)
        if len(batch) >= 4096:
            yield batch
            batch = []
    if batch:
        yield batch
