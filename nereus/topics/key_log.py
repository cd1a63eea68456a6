"""The key log of a compacted topic: the keys of its entries, recorded as they commit.

A view build needs only the keys, tombstone flags and timestamps of the records it
covers (``key_view``), yet finding them means reading and walking every stored batch
above the previous horizon. A topic meant to be compacted (a ``compactionThreshold``
policy, Kafka's ``cleanup.policy=compact``, or a view already built) therefore writes
those columns down once, beside its appends, and a build reads them instead of the
batches, fetching only the entries whose records survive.

The log is a stream of its own, ``internal://keys/{stream id}`` (the id, not the name:
a topic deleted and created again never meets the old log), written by the broker
that owns the topic. Each of its entries is one Arrow IPC stream of ``KEY_SCHEMA``
rows for a contiguous run ``[lo, hi)`` of whole entries of the topic, extracted from
the bytes that were committed at those offsets and reduced to the latest row of each
key (and every keyless row), as a build would reduce them. It is an accelerator only: a
range no log entry covers (appends before recording began, a flush lost with its
broker, a range with aborted transactions) is read from the topic as before, so a
missing or partial log never changes a view. A build trims the log below its new
horizon; deleting the topic deletes its log.
"""

from __future__ import annotations

import asyncio
import logging
import time
import types
from dataclasses import dataclass

import pyarrow as pa
from prometheus_client import Counter

from ..storage.api import FetchedEntry
from ..storage.errors import StorageError, StreamNotFound
from ..storage.key_view import KEY_SCHEMA, latest_rows
from ..tasks import spawn, wait_for

log = logging.getLogger(__name__)

#: Pending bytes of committed entries that start a flush, and the longest they wait.
FLUSH_BYTES = 16 << 20
FLUSH_SECONDS = 5.0
#: Log entries kept when no build trims them: each pins the WAL object it is stored in,
#: so a topic whose views are never built must not keep its log forever (a build reads
#: what was trimmed from the topic instead).
MAX_LOG_ENTRIES = 256
#: Pending bytes past which recording gives up on them (a log that cannot keep up
#: must not hold the topic's appends in memory; the build reads them instead).
MAX_PENDING_BYTES = 8 * FLUSH_BYTES
#: How long an unloading topic waits for its last keys to be written (an unload must not stall).
CLOSE_SECONDS = 1.0
_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")

RECORDED_BYTES = Counter("nereus_key_log_recorded_bytes", "Bytes of committed entries whose keys were recorded")
LOG_BYTES = Counter("nereus_key_log_bytes", "Bytes appended to key logs")
CPU_SECONDS = Counter("nereus_key_log_cpu_seconds", "CPU time spent extracting and encoding recorded keys")


#: (offset deltas, keys, tombstones, timestamps in ms) of an entry's records.
GivenKeys = tuple[list[int], list[bytes | None], list[bool], list[int]]


def log_name(stream_id: int) -> str:
    """The key log's stream name (the ``internal`` domain is never a topic)."""
    return f"internal://keys/{stream_id}"


@dataclass(frozen=True, slots=True)
class Recorded:
    """The keys of the topic's entries in ``[lo, hi)``, at ``position`` in the log."""

    stream_id: int
    lo: int
    hi: int
    keys: pa.Table  # the latest row of each key and the keyless rows
    records: int  # how many records the rows were reduced from
    position: int  # offset of this entry in the log


def encode(stream_id: int, lo: int, hi: int, keys: pa.Table, records: int) -> bytes:
    """One log entry (an Arrow IPC stream, the covered range in its schema metadata):
    ``keys``, the latest row of each key of ``[lo, hi)`` and its keyless rows, reduced
    from ``records`` records."""
    schema = KEY_SCHEMA.with_metadata({b"stream": str(stream_id).encode(), b"lo": str(lo).encode(),
                                       b"hi": str(hi).encode(), b"records": str(records).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema, options=_IPC_OPTIONS) as writer:
        writer.write_table(keys.select(KEY_SCHEMA.names).cast(KEY_SCHEMA).replace_schema_metadata(schema.metadata))
    return sink.getvalue().to_pybytes()


def decode(data: bytes | memoryview, position: int) -> Recorded:
    """A log entry; raises StorageError if it is not one."""
    try:
        table = pa.ipc.open_stream(pa.BufferReader(data)).read_all()
        meta = table.schema.metadata or {}
        stream_id, lo, hi, records = (int(meta[k]) for k in (b"stream", b"lo", b"hi", b"records"))
    except (pa.ArrowException, KeyError, ValueError, OSError) as exc:
        raise StorageError(f"unreadable key log entry at {position}: {exc}") from None
    if table.schema.names != KEY_SCHEMA.names or not lo <= hi:
        raise StorageError(f"key log entry at {position} is not one")
    return Recorded(stream_id, lo, hi, table.replace_schema_metadata(None), records, position)


def given_table(entries: list[tuple[FetchedEntry, GivenKeys]]) -> pa.Table:
    """Rows of ``KEY_SCHEMA`` from keys handed over with their entries."""
    cols: tuple[list, ...] = ([], [], [], [], [], [])
    for entry, (deltas, keys, tombstones, stamps) in entries:
        n = len(deltas)
        cols[0].extend(entry.base_offset + d for d in deltas)
        cols[1].extend(keys)
        cols[2].extend(tombstones)
        cols[3].extend(stamps)
        cols[4].extend([entry.base_offset] * n)
        cols[5].extend([entry.record_count] * n)
    return pa.table([pa.array(c, f.type) for c, f in zip(cols, KEY_SCHEMA)], schema=KEY_SCHEMA)


def contiguous_runs(entries: list[FetchedEntry]) -> list[list[FetchedEntry]]:
    """``entries`` (in offset order) cut where one does not begin where the last ended."""
    runs: list[list[FetchedEntry]] = []
    for entry in entries:
        if runs and runs[-1][-1].end_offset == entry.base_offset:
            runs[-1].append(entry)
        else:
            runs.append([entry])
    return runs


async def read(storage, stream_id: int, start: int, end: int) -> list[Recorded]:
    """The log entries of stream ``stream_id`` overlapping ``[start, end)``, by ``lo``
    (none when the topic has no log). Entries that overlap an earlier one are left out."""
    try:
        log_id = await storage.stream_id(log_name(stream_id))
    except StreamNotFound:
        return []
    first, tail = await storage.start(log_id), await storage.tail(log_id)
    out: list[Recorded] = []
    offset = first
    loop = asyncio.get_running_loop()
    while offset < tail.next:
        got = await storage.reader.read(log_id, offset, tail.next, 8 << 20, fill_cache=False)
        if not got:
            break
        for entry in got:
            if entry.base_offset < offset:
                continue
            rec = await loop.run_in_executor(None, decode, entry.data, entry.base_offset)
            if rec.stream_id == stream_id and rec.hi > start and rec.lo < end:
                out.append(rec)
        offset = got[-1].end_offset
    out.sort(key=lambda r: r.lo)
    kept: list[Recorded] = []
    for rec in out:
        if not kept or rec.lo >= kept[-1].hi:
            kept.append(rec)
    return kept


async def trim_below(storage, stream_id: int, horizon: int, recorded: list[Recorded]) -> None:
    """Drop the log entries that end at or below ``horizon`` (a build covers them now)."""
    done = [r.position for r in recorded if r.hi <= horizon]
    if not done:
        return
    try:
        log_id = await storage.stream_id(log_name(stream_id))
        await storage.trim(log_id, max(done) + 1)
    except StreamNotFound:
        pass


async def delete_topic_stream(storage, name: str) -> None:
    """Delete a topic's stream and its key log (StreamNotFound if the stream does not exist)."""
    stream_id = await storage.stream_id(name)
    await storage.delete_stream(name)
    try:
        await storage.delete_stream(log_name(stream_id))
    except StreamNotFound:
        pass


# A recorder's containers until ``enable`` makes its own (immutable: a mistaken write fails loudly).
_NOTHING_PENDING: tuple = ()
_NO_KEYS = types.MappingProxyType({})


class KeyRecorder:
    """Writes the key log of one topic from the entries it commits (in commit order).

    ``extract`` gives the keys of many stored entries (``key_compaction.entries_keys``);
    it runs in an executor, a flush at a time, never on the append path.
    ``session``: the topic's stream handle (its ``fencing_token`` is the append session this
    broker holds); the log's own session is taken only while the topic's tail still carries
    it, so an owner paused past a handoff does not take the log from the topic's new owner.
    """

    # One per loaded topic, most never enabled: slots keep the idle ones small. ``_flushing`` holds
    # the running flush (a strong reference, so no task set is needed).
    __slots__ = ("storage", "stream_id", "extract", "session", "enabled", "_pending", "_given", "_pending_bytes",
                 "_handle", "_start", "_flushing", "_timer", "_closed", "_gone")

    def __init__(self, storage, stream_id: int, extract, session=None) -> None:
        self.storage = storage
        self.stream_id = stream_id
        self.extract = extract
        self.session = session
        self.enabled = False
        # Made by ``enable``: most topics never record keys.
        self._pending: list[FetchedEntry] = _NOTHING_PENDING
        self._given: dict[int, GivenKeys] = _NO_KEYS  # by base offset: the pending entries' keys handed over
        self._pending_bytes = 0
        self._handle = None
        self._start = 0  # the log's start offset, as this recorder last knew it
        self._flushing: asyncio.Task | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        self._gone = False  # the topic was deleted or is another broker's now: nothing more is recorded

    def enable(self) -> None:
        if not self.enabled and not self._closed:
            log.info("stream %d: recording its keys for compaction", self.stream_id)
            self.enabled = True
            self._pending, self._given = [], {}

    def committed(self, base: int, count: int, data: bytes | memoryview, keys: GivenKeys | None = None) -> None:
        """An entry committed at ``base`` (called in offset order); ``keys``: its records'
        (offset deltas, keys, tombstones, timestamps) when the caller has them (a Kafka
        produce to a compacted topic decodes its records anyway), else they are scanned."""
        if not self.enabled or self._closed or self._gone:
            return
        if self._pending_bytes >= MAX_PENDING_BYTES:
            log.warning("stream %d: the key log fell behind; %d bytes of entries left to the next build's reads",
                        self.stream_id, self._pending_bytes)
            self._pending, self._given, self._pending_bytes = [], {}, 0
        self._pending.append(FetchedEntry(base, count, data))
        if keys is not None:
            self._given[base] = keys
        self._pending_bytes += len(data)
        if self._pending_bytes >= FLUSH_BYTES:
            self._flush_soon(0)
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._flush_soon, 0)

    def _flush_soon(self, _delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is None or self._flushing.done():
            self._flushing = spawn(self.flush(), f"key log of stream {self.stream_id}")

    async def drain(self) -> None:
        """Write what is pending now, after any flush under way (a build is about to read the log)."""
        while self._pending or (self._flushing is not None and not self._flushing.done()):
            if self._flushing is None or self._flushing.done():
                self._flush_soon(0)
            await asyncio.shield(self._flushing)

    async def flush(self) -> None:
        """Write what is pending (one log entry per contiguous run); one flush at a time
        (``_flush_soon``, ``drain``): the log has one append session per broker."""
        while self._pending:
            entries, self._pending, self._pending_bytes = self._pending, [], 0
            given, self._given = self._given, {}
            loop = asyncio.get_running_loop()
            for run in contiguous_runs(entries):
                if self._gone:
                    return
                try:
                    data = await loop.run_in_executor(None, self._encode, run, given)
                    await self._append(data)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the build reads this run from the topic instead
                    log.warning("stream %d: keys of [%d, %d) not recorded: %s", self.stream_id, run[0].base_offset,
                                run[-1].end_offset, exc)
                    self._handle = None

    def _encode(self, run: list[FetchedEntry], given: dict[int, GivenKeys]) -> bytes:
        started = time.thread_time()
        scanned = [entry for entry in run if entry.base_offset not in given]
        tables = [self.extract(scanned)] if scanned else []
        if len(scanned) < len(run):
            tables.append(given_table([(e, given[e.base_offset]) for e in run if e.base_offset in given]))
        keys = tables[0] if len(tables) == 1 else pa.concat_tables([t.cast(KEY_SCHEMA) for t in tables])
        # Only the latest row of a key in the run can reach a view: a build takes what
        # it would have reduced the run to itself (``key_view.latest_rows``).
        data = encode(self.stream_id, run[0].base_offset, run[-1].end_offset, *latest_rows(keys))
        CPU_SECONDS.inc(time.thread_time() - started)
        RECORDED_BYTES.inc(sum(len(e.data) for e in run))
        LOG_BYTES.inc(len(data))
        return data

    async def _append(self, data: bytes) -> None:
        if self._handle is None:
            handle = await self.storage.open_stream(log_name(self.stream_id), create=True)
            # Checked after the log exists: a deletion of the topic that this check does
            # not see deletes the topic's record later, and only then its log, so either
            # the deleter or this recorder removes a log created for a deleted topic.
            exists, tail = await asyncio.gather(self.storage.exists(self.stream_id), self.storage.tail(self.stream_id))
            if not exists:
                self._stop("was deleted")
                try:
                    await self.storage.delete_stream(log_name(self.stream_id))
                except StreamNotFound:
                    pass
                return
            if self.session is not None and tail.token != self.session.fencing_token:
                self._stop("is appended to by a newer session (which records its keys)")
                return
            self._handle = handle
            self._start = await self.storage.start(handle.stream_id)
        position = (await self._handle.append(data, 1)).base_offset
        if position + 1 - self._start > MAX_LOG_ENTRIES:  # no build for long: the oldest go
            self._start = await self.storage.trim(self._handle.stream_id, position + 1 - MAX_LOG_ENTRIES)

    def _stop(self, why: str) -> None:
        log.info("stream %d %s: its keys are no longer recorded here", self.stream_id, why)
        self._gone = True
        self._pending, self._given, self._pending_bytes = [], {}, 0

    async def close(self) -> None:
        """Flush what is pending (best effort) and let the log's append session go."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._pending and (self._flushing is None or self._flushing.done()):
            self._flushing = spawn(self.flush(), f"key log of stream {self.stream_id}")
        if self._flushing is not None:
            try:
                await wait_for(asyncio.shield(self._flushing), CLOSE_SECONDS)
            except Exception:  # a timeout too: the build reads what was not recorded
                self._flushing.cancel()
        if self._handle is not None:
            handle, self._handle = self._handle, None
            await handle.close()


__all__ = ["FLUSH_BYTES", "FLUSH_SECONDS", "GivenKeys", "KeyRecorder", "Recorded", "contiguous_runs", "decode", "delete_topic_stream",
           "encode", "given_table", "log_name", "read", "trim_below"]
