"""Key-based topic compaction (Pulsar compacted topics, Kafka ``cleanup.policy=compact``).

The storage layer builds and serves the views (``storage.key_view``); this module
gives it the keys of stored entries of both protocols (recorded at append in the
topic's key log, ``key_log``, else read from the entries), runs the builds of this
broker's topics (one at a time per topic, under the stream's compaction lease, so
two brokers never build the same view) and caches the loaded views for readers.

What a key and a tombstone are, per protocol:

- Pulsar: the key is the message's ``partition_key`` (base64-decoded when flagged);
  a message with ``null_value`` or an empty payload is a tombstone (Pulsar's
  compactor and table view remove the key on an empty payload).
- Kafka: the record key; a null value is a tombstone (an empty value is a value).

Records without a key are kept in the view (Pulsar keeps them; Kafka refuses them
on compacted topics at produce time). Transactions: a view never reaches past the
stream's last stable offset, and records of aborted transactions, like markers, give
no keys (they neither survive nor replace an earlier value of their key). On Kafka compact topics a tombstone stays for
``delete.retention.ms`` (default 24 h) past its timestamp, so a reader that was behind
still learns of it; Pulsar's compactor drops the key at once (the admin layer says which).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pyarrow as pa

from ..codec.kafka.batch import HEADER_SIZE as KAFKA_HEADER_SIZE, NO_COMPRESSION, InvalidBatch, parse_header
from ..codec.kafka.batch_scan import scan as kafka_scan
from ..codec.kafka.inflate import decompress as kafka_decompress
from ..codec.kafka.records import decode_records
from ..ledger.entry import EntryFlags, EntryFormat, decode_entry, encode_entry as encode_stored
from ..codec.pulsar.batch_scan import scan
from ..codec.pulsar import (BatchBuilder, MalformedBatch, compress, decompress, encode_entry, entry_messages, pb,
                            split_entry)
from ..storage import columns, key_view, records
from ..storage.compaction_lease import lease
from ..storage.api import FetchedEntry
from ..storage.errors import CompactionConflict, StorageError
from ..storage.key_view import KEY_SCHEMA, EntryKeys, KeyView
from ..tasks import spawn
from . import key_log
from .convert import key_from_pulsar

log = logging.getLogger(__name__)
_U32 = struct.Struct(">I")

#: Pulsar's LongRunningProcessStatus values.
NOT_RUN, RUNNING, SUCCESS, ERROR = "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"
#: How long a loaded view is trusted before its record is read again.
VIEW_RECHECK_SECONDS = 1.0


def entry_keys(base: int, data: memoryview) -> EntryKeys:
    """(offsets, keys, tombstones, timestamps ms) of a stored entry of either protocol."""
    header, body = decode_entry(data)
    if header.flags & EntryFlags.CONTROL:
        return [], [], [], []
    if header.format == EntryFormat.KAFKA:
        _, batch = decode_records(body)
        return ([base + r.offset_delta for r in batch], [r.key for r in batch], [r.value is None for r in batch],
                [r.timestamp for r in batch])
    meta, payload = split_entry(body)
    if meta.HasField("marker_type") or meta.encryption_keys:
        return [], [], [], []  # markers carry nothing; encrypted batches cannot be split
    if meta.HasField("num_messages_in_batch"):
        return _batch_keys(base, meta, payload)
    offsets, keys, tombstones, stamps = [], [], [], []
    for m in entry_messages(meta, payload):
        single = m.metadata
        offsets.append(base + max(m.index, 0))
        keys.append(key_from_pulsar(single))
        tombstones.append(bool(single.null_value) or len(m.payload) == 0)
        stamps.append(single.event_time or meta.publish_time)
    return offsets, keys, tombstones, stamps


def entries_keys(entries: list[FetchedEntry]) -> pa.Table:
    """``entry_keys`` of many entries as one table (``key_view.KEY_SCHEMA``): the Pulsar
    batches and the Kafka record batches among them are scanned side by side
    (``batch_scan`` of each codec), not parsed one message at a time."""
    cols: tuple[list, list, list, list, list, list] = ([], [], [], [], [], [])
    batches: list[bytes | memoryview] = []
    lanes: list[tuple[int, int, int, int]] = []  # (base, messages, publish time, record count)
    sections: list[bytes | memoryview] = []
    kafka_lanes: list[tuple[int, int, int, int]] = []  # (base, records, base timestamp, record count)
    for entry in entries:
        header, body = decode_entry(entry.data)
        if header.flags & EntryFlags.CONTROL:
            continue  # markers carry no keys
        meta = None
        if header.format == EntryFormat.KAFKA:
            kafka = _kafka_section(body)
            if kafka is not None:
                sections.append(kafka[0])
                kafka_lanes.append((entry.base_offset, kafka[1], kafka[2], entry.record_count))
                continue
        elif header.format == EntryFormat.PULSAR:
            meta, payload = split_entry(body)
        if (meta is not None and meta.HasField("num_messages_in_batch") and not meta.encryption_keys
                and not meta.HasField("marker_type")):
            batches.append(decompress(meta.compression, payload, meta.uncompressed_size))
            lanes.append((entry.base_offset, meta.num_messages_in_batch, meta.publish_time, entry.record_count))
            continue
        _add_entry_keys(cols, entry)
    tables = [_keys_table(*cols)] if cols[0] or not (batches or sections) else []
    if batches:
        tables.append(_scanned_keys(batches, lanes))
    if sections:
        tables.append(_scanned_kafka_keys(sections, kafka_lanes, entries))
    return pa.concat_tables(tables) if len(tables) > 1 else tables[0]


def _add_entry_keys(cols: tuple[list, ...], entry: FetchedEntry) -> None:
    """``entry_keys`` of one entry appended to the columns of ``_keys_table``."""
    offsets, keys, tombstones, stamps = entry_keys(entry.base_offset, memoryview(entry.data))
    for column, values in zip(cols, (offsets, keys, tombstones, stamps, [entry.base_offset] * len(offsets),
                                     [entry.record_count] * len(offsets))):
        column += values


def _kafka_section(body: memoryview) -> tuple[bytes | memoryview, int, int] | None:
    """(uncompressed records, record count, base timestamp) of a stored Kafka batch, or
    None for a batch the per-entry path reads (a control batch, a broken one)."""
    try:
        header = parse_header(body)
        if header.control or header.length > len(body):
            return None
        records_ = body[KAFKA_HEADER_SIZE:header.length]
        if header.compression != NO_COMPRESSION:
            records_ = kafka_decompress(header.compression, records_)
    except InvalidBatch:
        return None
    return records_, header.record_count, header.base_timestamp


def _scanned_kafka_keys(sections: list[bytes | memoryview], lanes: list[tuple[int, int, int, int]],
                        entries: list[FetchedEntry]) -> pa.Table:
    base, count, base_ts, records_ = (np.array(c, np.int64) for c in zip(*lanes))
    try:
        found = kafka_scan(sections, count.tolist())
    except InvalidBatch:  # a record the scan refuses: the per-entry path reads it, or says what is wrong
        wanted = set(base.tolist())
        cols: tuple[list, ...] = ([], [], [], [], [], [])
        for entry in entries:
            if entry.base_offset in wanted:
                _add_entry_keys(cols, entry)
        return _keys_table(*cols)
    offsets_, data, has_key = found.key_array()
    keys = pa.Array.from_buffers(pa.binary(), len(has_key), [pa.py_buffer(np.packbits(has_key, bitorder="little")),
                                                             pa.py_buffer(offsets_), pa.py_buffer(data)])
    entry_base = base[found.batch]
    return pa.table([columns.array(entry_base + found.offset_delta, pa.int64()), keys,
                     columns.array(found.value_null, pa.bool_()),
                     columns.array(base_ts[found.batch] + found.timestamp_delta, pa.int64()),
                     columns.array(entry_base, pa.int64()), columns.array(records_[found.batch], pa.int32())],
                    schema=KEY_SCHEMA)


def _keys_table(offsets, keys, tombstones, stamps, entry_base, entry_records) -> pa.Table:
    """A table of ``KEY_SCHEMA`` (through ``storage.columns``: no pandas import)."""
    return pa.table([columns.array(np.asarray(offsets, np.int64), pa.int64()), columns.binary(keys),
                     columns.array(np.asarray(tombstones, np.bool_), pa.bool_()),
                     columns.array(np.asarray(stamps, np.int64), pa.int64()),
                     columns.array(np.asarray(entry_base, np.int64), pa.int64()),
                     columns.array(np.asarray(entry_records, np.int32), pa.int32())], schema=KEY_SCHEMA)


def _scanned_keys(batches: list[bytes | memoryview], lanes: list[tuple[int, int, int, int]]) -> pa.Table:
    base, count, publish, records_ = (np.array(c, np.int64) for c in zip(*lanes))
    try:
        found = scan(batches, count.tolist())
    except MalformedBatch:  # a layout the scan does not read, or a broken batch (which this reports)
        cols: tuple[list, list, list, list] = ([], [], [], [])
        for data, (b, n, p, _) in zip(batches, lanes):
            meta = pb.MessageMetadata(num_messages_in_batch=n, publish_time=p)
            for column, values in zip(cols, _batch_keys(b, meta, memoryview(data), decompressed=True)):
                column += values
        entry_base = np.repeat(base, count)
        return _keys_table(*cols, entry_base, np.repeat(records_, count))
    rows = int(count.sum())
    entry_base = base[found.batch]
    offsets = entry_base + found.index
    valid = pa.py_buffer(np.packbits(found.has_key, bitorder="little"))
    views = pa.py_buffer(found.key_views())
    keys = pa.Array.from_buffers(pa.binary_view(), rows, [valid, views, pa.py_buffer(found.buffer)]).cast(pa.binary())
    if found.key_b64.any():
        decoded = keys.to_pylist()
        for i in np.flatnonzero(found.key_b64 & found.has_key):
            decoded[i] = base64.b64decode(decoded[i])
        keys = columns.binary(decoded)
    tombstones = (found.payload_size == 0) | found.null_value
    stamps = np.where(found.event_time != 0, found.event_time, publish[found.batch])
    return pa.table([columns.array(offsets, pa.int64()), keys, columns.array(tombstones, pa.bool_()),
                     columns.array(stamps, pa.int64()), columns.array(entry_base, pa.int64()),
                     columns.array(records_[found.batch], pa.int32())], schema=KEY_SCHEMA)


def _batch_keys(base: int, meta, payload: memoryview, *, decompressed: bool = False) -> EntryKeys:
    """``entry_keys`` of a Pulsar batch: one metadata object reused, nothing else built
    per message (the cost of this loop is why ``entries_keys`` scans instead)."""
    if not decompressed:
        payload = decompress(meta.compression, payload, meta.uncompressed_size)
    data = memoryview(payload).cast("B")
    count, end, pos = meta.num_messages_in_batch, len(data), 0
    publish = meta.publish_time
    single = pb.SingleMessageMetadata()
    keys: list[bytes | None] = []
    tombstones: list[bool] = []
    stamps: list[int] = []
    for index in range(count):
        if end - pos < 4:
            raise MalformedBatch(f"batch ends before message {index} of {count}")
        meta_end = pos + 4 + _U32.unpack_from(data, pos)[0]
        single.ParseFromString(data[pos + 4:meta_end])
        size = single.payload_size
        pos = meta_end + size
        if pos > end:
            raise MalformedBatch(f"message {index}: payload size {size} overruns the batch")
        if not single.HasField("partition_key") or single.null_partition_key:
            keys.append(None)
        elif single.partition_key_b64_encoded:
            keys.append(base64.b64decode(single.partition_key))
        else:
            keys.append(single.partition_key.encode())
        tombstones.append(size == 0 or single.null_value)
        stamps.append(single.event_time or publish)
    return list(range(base, base + count)), keys, tombstones, stamps


#: What a dropped message of a shrunk batch becomes: metadata ``payload_size=0``, no payload.
_PLACEHOLDER = _U32.pack(2) + b"\x18\x00"


def shrink_entries(items: list[tuple[bytes | memoryview, tuple[int, ...]]]) -> list[bytes | None]:
    """Pulsar batches with only the messages at ``keep`` (indexes in the batch) kept whole.

    Each other message before the last kept one becomes an empty placeholder, so every
    kept message keeps its batch index (its MessageId) and the entry its record count,
    while a compacted reader no longer downloads what it skips (the dispatcher's ack
    set hides the placeholders, as it hid the dropped messages). The batch ends at its
    last kept message (``num_messages_in_batch`` says so): a client acknowledges a
    batch's entry once it acknowledged every message the batch holds, so a cumulative
    ack of the last kept message clears the entry, and individual acks do when no
    placeholder precedes a kept message. None: left as stored (a Kafka
    batch, which the fetch path rebuilds; unbatched, encrypted or marker entries).
    The batches are scanned side by side (``batch_scan``); kept messages are copied
    byte for byte.
    """
    out: list[bytes | None] = [None] * len(items)
    todo: list[tuple[int, object, object, tuple[int, ...]]] = []  # (item, header, metadata, keep)
    batches: list[bytes] = []
    for i, (data, keep) in enumerate(items):
        header, body = decode_entry(data)
        if header.format != EntryFormat.PULSAR or header.flags & EntryFlags.CONTROL:
            continue
        meta, payload = split_entry(body)
        if not meta.HasField("num_messages_in_batch") or meta.encryption_keys or meta.HasField("marker_type"):
            continue
        batches.append(decompress(meta.compression, payload, meta.uncompressed_size))
        todo.append((i, header, meta, keep))
    if not todo:
        return out
    counts = [meta.num_messages_in_batch for _, _, meta, _ in todo]
    try:
        found = scan(batches, counts)
    except MalformedBatch:  # a layout the scan does not read: message by message
        for (i, _, _, keep) in todo:
            out[i] = _shrink_parsed(items[i][0], keep)
        return out
    raw, by_batch = found.buffer, found.rows_by_batch(counts)
    first = 0
    for (i, header, meta, keep), count in zip(todo, counts):
        parts, expected = [], 0
        for index in keep:
            if not 0 <= index < count:
                raise MalformedBatch(f"message {index} of a batch of {count}")
            parts.append(_PLACEHOLDER * (index - expected))
            row = by_batch[first + index]
            parts.append(raw[found.message_start[row]:found.message_end[row]].tobytes())
            expected = index + 1
        batch = b"".join(parts)
        meta.num_messages_in_batch = expected
        meta.uncompressed_size = len(batch)
        stored = compress(meta.compression, batch) if meta.compression else batch
        out[i] = b"".join(encode_stored(header, b"".join(encode_entry(meta, stored))))
        first += count
    return out


def shrink_entry(data: bytes | memoryview, keep: tuple[int, ...]) -> bytes | None:
    """``shrink_entries`` of one entry."""
    return shrink_entries([(data, keep)])[0]


def _shrink_parsed(data: bytes | memoryview, keep: tuple[int, ...]) -> bytes | None:
    header, body = decode_entry(data)
    meta, payload = split_entry(body)
    wanted = set(keep)
    batch = BatchBuilder()
    for m in entry_messages(meta, payload):
        if m.index > keep[-1]:
            break
        if m.index in wanted:
            batch.add(m.payload, m.metadata)
        else:
            batch.add(b"", pb.SingleMessageMetadata())
    raw = batch.to_bytes()
    meta.num_messages_in_batch = batch.num_messages
    meta.uncompressed_size = len(raw)
    stored = compress(meta.compression, raw) if meta.compression else raw
    return b"".join(encode_stored(header, b"".join(encode_entry(meta, stored))))


class CompactionRunning(Exception):
    """A compaction of this topic is already running."""


@dataclass
class CompactionStatus:
    status: str = NOT_RUN
    last_error: str | None = None
    result: key_view.BuildResult | None = None

    def to_json(self) -> dict:
        return {"status": self.status, "lastError": self.last_error or ""}


class StableView(Protocol):
    """What a build needs to know of a stream's transactions below its committed end."""

    lso: int  # the last stable offset: no record at or past it is built into a view

    def aborted(self, start: int, end: int) -> Sequence[object]:
        """The aborted transactions overlapping ``[start, end)`` (empty: none)."""

    def is_aborted(self, pid: int, offset: int) -> bool:
        """Whether ``offset`` was written by producer ``pid`` in a transaction that aborted."""


#: ``stable_end(stream_id, end)``: the stream's transactions below ``end``, its committed end read
#: just before (the transactions layer answers: ``StreamTransactions.read_view``).
StableEnd = Callable[[int, int], Awaitable[StableView]]


@dataclass(frozen=True, slots=True)
class AllStable:
    """A stream without transactions: every record below its end is stable, none aborted."""

    lso: int

    def aborted(self, start: int, end: int) -> Sequence[object]:
        return ()

    def is_aborted(self, pid: int, offset: int) -> bool:
        return False


async def all_stable(stream_id: int, end: int) -> StableView:
    """The ``StableEnd`` of a broker that serves no transactions."""
    return AllStable(end)


class KeyCompactor:
    """Builds key-compacted views of topics, in the background, one build per topic at a time."""

    def __init__(self, storage, *, owner: str, on_built: Callable[[int], None] | None = None,
                 before_build: Callable[[str], Awaitable[None]] | None = None,
                 stable_end: StableEnd = all_stable) -> None:
        """``on_built(stream_id)`` after each view switched in (drops this broker's cached copy);
        ``before_build(topic)`` before a build reads the topic's key log (writes what is pending);
        ``stable_end``: where a build stops and which records it leaves out (a broker that serves
        transactions sets the transactions layer's here)."""
        self.storage = storage
        self.on_built = on_built
        self.before_build = before_build
        self.stable_end = stable_end
        self.meta = storage.meta
        self.owner = owner
        self.statuses: dict[str, CompactionStatus] = {}
        self._tasks: dict[str, asyncio.Task] = {}
        self._housekeeping: set[asyncio.Task] = set()

    def status(self, topic: str) -> CompactionStatus:
        return self.statuses.get(topic, CompactionStatus())

    def running(self, topic: str) -> bool:
        task = self._tasks.get(topic)
        return task is not None and not task.done()

    def trigger(self, topic: str, *, delete_retention_ms: int = key_view.DELETE_RETENTION_MS,
                min_lag_ms: int = 0) -> asyncio.Task:
        """Start compacting ``topic`` (a stream name); raises CompactionRunning."""
        if self.running(topic):
            raise CompactionRunning(f"compaction of {topic} is already running")
        self.statuses[topic] = CompactionStatus(RUNNING)
        task = asyncio.ensure_future(self.compact(topic, delete_retention_ms=delete_retention_ms,
                                                  min_lag_ms=min_lag_ms))
        self._tasks[topic] = task
        task.add_done_callback(lambda t: self._done(topic, t))
        return task

    def _done(self, topic: str, task: asyncio.Task) -> None:
        if self._tasks.get(topic) is task:
            del self._tasks[topic]
        if task.cancelled():
            self.statuses[topic] = CompactionStatus(ERROR, "cancelled")
        elif task.exception() is not None:
            exc = task.exception()
            log.warning("compaction of %s failed: %s", topic, exc)
            self.statuses[topic] = CompactionStatus(ERROR, f"{type(exc).__name__}: {exc}")
        else:
            self.statuses[topic] = CompactionStatus(SUCCESS, None, task.result())

    async def compact(self, topic: str, *, delete_retention_ms: int = key_view.DELETE_RETENTION_MS,
                      min_lag_ms: int = 0) -> key_view.BuildResult:
        """Build the view of ``topic`` up to its committed end now, or with ``min_lag_ms``
        (Kafka's ``min.compaction.lag.ms``) up to the first slice committed less than that
        long ago (raises CompactionConflict)."""
        sid = await self.storage.stream_id(topic)
        tail = await self.storage.tail(sid)
        txns = await self.stable_end(sid, tail.next)  # after the tail: the LSO is at most it
        horizon, size = tail.next, tail.size
        cutoff = int(time.time() * 1000) - min_lag_ms if min_lag_ms > 0 else None
        if cutoff is not None or txns.lso < tail.next:
            horizon, size = await self._lagged_horizon(sid, tail, cutoff, txns.lso)
        extract, extract_many = entry_keys, entries_keys
        if txns.aborted(0, horizon):
            def aborted(base: int, data: memoryview) -> bool:
                header, _ = decode_entry(data)
                return bool(header.flags & EntryFlags.TRANSACTIONAL) and txns.is_aborted(header.producer_id, base)

            def extract(base: int, data: memoryview) -> EntryKeys:
                return ([], [], [], []) if aborted(base, data) else entry_keys(base, data)

            def extract_many(entries: list[FetchedEntry]) -> pa.Table:
                return entries_keys([e for e in entries if not aborted(e.base_offset, memoryview(e.data))])
        if self.before_build is not None:
            await self.before_build(topic)
        recorded = await self._recorded(sid, horizon)
        known = [(r.lo, r.hi, r.keys, r.records) for r in recorded if not txns.aborted(r.lo, r.hi)]
        async with lease(self.meta, sid, self.owner):
            async def build(known_keys) -> key_view.BuildResult:
                return await key_view.build(self.meta, self.storage.objects, self.storage.reader, sid, extract,
                                            horizon=horizon, delete_retention_ms=delete_retention_ms,
                                            lease_owner=self.owner, stream_size=size, shrink=shrink_entries,
                                            extract_many=extract_many, known=known_keys)
            try:
                result = await build(known)
            except key_view.KnownKeysMismatch as exc:  # a log that is wrong must not stop compaction
                log.warning("%s: %s; building from the topic alone", topic, exc)
                recorded = []
                result = await build(None)
        if recorded:  # housekeeping, after the build is done (a failure: the next build trims)
            spawn(key_log.trim_below(self.storage, sid, result.horizon, recorded), f"trim of {topic}'s key log",
                  self._housekeeping)
        if self.on_built is not None:
            self.on_built(sid)
        return result

    async def _recorded(self, stream_id: int, horizon: int) -> list[key_log.Recorded]:
        """The key log below ``horizon`` (none if it cannot be read: the build reads the entries)."""
        try:
            return await key_log.read(self.storage, stream_id, 0, horizon)
        except StorageError as exc:
            log.warning("stream %d: key log unreadable, reading the entries instead: %s", stream_id, exc)
            return []

    async def _lagged_horizon(self, stream_id: int, tail, cutoff_ms: int | None,
                              stable: int) -> tuple[int, int]:
        """(offset, stream size there) of the first slice above the view committed after ``cutoff_ms``
        (None: any time) or reaching the last stable offset ``stable``."""
        start = (await key_view.state(self.meta, stream_id)).horizon
        lo, hi = records.index_range(stream_id, start)
        seen = set()
        async for rec in self.meta.range_scan(lo, hi, partition_key=records.stream_partition(stream_id)):
            for entry in records.decode_group(rec.value):
                seen.add(entry.base)
                if entry.last >= start and _stops(entry, cutoff_ms, stable):
                    return entry.base, entry.size_before
        for entry in tail.pending:
            if entry.base not in seen and entry.last >= start and _stops(entry, cutoff_ms, stable):
                return entry.base, entry.size_before
        return tail.next, tail.size

    async def close(self) -> None:
        tasks = [*self._tasks.values(), *self._housekeeping]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _stops(entry, cutoff_ms: int | None, stable: int) -> bool:
    """Whether a view must end before this slice: too young, or not all stable."""
    return entry.last >= stable or (cutoff_ms is not None and entry.timestamp > cutoff_ms)


class KeyViews:
    """Loaded views per stream, re-read when their record changes (checked at most once a second)."""

    def __init__(self, storage) -> None:
        self.storage = storage
        self._views: dict[int, tuple[float, key_view.ViewState, KeyView]] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def get(self, stream_id: int) -> KeyView:
        cached = self._views.get(stream_id)
        if cached is not None and time.monotonic() - cached[0] < VIEW_RECHECK_SECONDS:
            return cached[2]
        lock = self._locks.setdefault(stream_id, asyncio.Lock())
        async with lock:
            cached = self._views.get(stream_id)
            if cached is not None and time.monotonic() - cached[0] < VIEW_RECHECK_SECONDS:
                return cached[2]
            current = await key_view.state(self.storage.meta, stream_id)
            if cached is not None and cached[1].object == current.object and cached[1].horizon == current.horizon:
                view = cached[2]
            else:
                _, view = await key_view.load(self.storage.meta, self.storage.objects, stream_id, current)
            self._views[stream_id] = (time.monotonic(), current, view)
            return view

    def drop(self, stream_id: int) -> None:
        self._views.pop(stream_id, None)


__all__ = ["AllStable", "CompactionConflict", "CompactionRunning", "CompactionStatus", "KeyCompactor", "StableEnd",
           "StableView", "all_stable", "KeyViews", "entries_keys", "entry_keys", "shrink_entries", "shrink_entry",
           "ERROR", "NOT_RUN", "RUNNING", "SUCCESS"]
