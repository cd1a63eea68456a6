"""Key-compacted views of a stream: the latest record per key below a horizon.

A view covers the offsets ``[0, horizon)`` of one stream and holds, for that range,
only the latest record of each key, at its ORIGINAL offset; records without a key
are all kept; a tombstone (the caller says which records are: a null value) is kept
until ``delete_retention_ms`` past its timestamp (0: not at all), then dropped with its key. The
storage layer never looks inside entries: the caller passes a ``KeyExtractor`` that
gives the keys of one stored entry (the topic layer knows the protocols).

A view is ONE immutable Parquet object, one row per surviving record::

    offset int64 | key binary (null: no key) | tombstone bool | timestamp int64 (ms)
    | entry_base int64 | entry_records int32 | entry binary

``entry`` holds the stored entry on the first surviving row of each entry (null on
the others): byte for byte, or reduced by the caller's ``EntryShrinker`` to what
survives (same record count and offsets), so a reader serves the original entries
and says which of their records survive (Pulsar: an ack set; Kafka: a rebuilt batch
with gaps).

The stream's ``keyview`` record ``{horizon, object, records, entries, ...}`` names the
view in force; a new view is built from the previous one plus the records of
``[previous horizon, new horizon)`` (incremental) and switched in by one CAS on that
record, under the stream's compaction lease. The object is referenced as the pair
``[stream, VIEW_REF]`` in the reference records of ``gc``; the previous view is
released after the switch. A pending marker (``kind: keyview``) written before the
object put lets the collector finish or undo the change of a builder that died.

The rows in memory (a build's input, the merge, the Parquet encoding) are
``key_view_rows.py``; this module reads and switches views through the metadata plane.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ..objstore import ObjectStore
from . import columns, gc, metrics, records
from .api import FetchedEntry
from .compaction_lease import check_lease
from .errors import CompactionConflict, CorruptObject, StorageError
from .key_view_rows import (KEY_SCHEMA, SCHEMA, BuildInput, EntriesKeyExtractor, EntryKeys, EntryShrinker, KeyExtractor,
                            encode, latest_of, latest_rows, merge, read_parquet)
from .reader import StreamReader

log = logging.getLogger(__name__)
#: The ``kind`` of a view build's pending markers (resolved by ``resolve_marker``).
MARKER_KIND = "keyview"

#: The ``base`` of a view's reference pair (a view is no slice of the stream).
VIEW_REF = -1
#: Kafka's default ``delete.retention.ms``: how long a tombstone outlives its write.
DELETE_RETENTION_MS = 24 * 3600 * 1000
_READ_BYTES = 8 << 20

#: Keys known without reading the entries (the topic layer records them at append):
#: ``(lo, hi, rows, records)``, the ``KEY_SCHEMA`` rows of the whole entries in ``[lo, hi)``
#: reduced to the latest row of each key and every keyless row (``latest_rows``), and the
#: number of records they came from.
KnownKeys = tuple[int, int, pa.Table, int]

#: Input bytes handed to an ``EntriesKeyExtractor`` at a time, and how many such calls run at
#: once (numpy releases the GIL: the key scans of two chunks use two cores).
_EXTRACT_BYTES = 32 << 20
_EXTRACT_PARALLEL = max(1, min(2, os.cpu_count() or 1))
#: Surviving entries this close (in offsets) are read in one pass, with what lies between.
_SURVIVOR_GAP = 4096


def view_key(stream_id: int) -> str:
    """The stream's record naming its key-compacted view."""
    return f"{records.stream_partition(stream_id)}/keyview"


@dataclass(frozen=True, slots=True)
class ViewEntry:
    """A stored entry of the view and which of its records survive (indexes in the entry)."""

    entry: FetchedEntry
    keep: tuple[int, ...]

    @property
    def whole(self) -> bool:
        return len(self.keep) == self.entry.record_count


@dataclass(slots=True)
class KeyView:
    """A loaded view: its horizon and its entries in offset order."""

    stream_id: int
    horizon: int
    object: str | None
    entries: list[ViewEntry] = field(default_factory=list)
    _bases: list[int] = field(default_factory=list)
    _gaps: tuple[list[int], list[int]] | None = None  # starts and ends of the dropped runs, on first use

    def __post_init__(self) -> None:
        self._bases = [e.entry.base_offset for e in self.entries]

    @property
    def records(self) -> int:
        return sum(len(e.keep) for e in self.entries)

    def read(self, start: int, max_bytes: int = 1 << 20) -> list[ViewEntry]:
        """View entries with a surviving record at or after ``start`` (at least one if any)."""
        from bisect import bisect_right

        i = max(0, bisect_right(self._bases, start) - 1)
        out, total = [], 0
        for item in self.entries[i:]:
            if item.entry.base_offset + item.keep[-1] < start:
                continue
            if out and total >= max_bytes:
                break
            out.append(item)
            total += len(item.entry.data)
        return out

    def dropped_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """The offsets of ``[start, end)`` the view does not keep, as sorted, disjoint,
        non-adjacent half-open ranges (everything below the horizon that is not a survivor)."""
        from bisect import bisect_left, bisect_right

        if self._gaps is None:
            kept = [e.entry.base_offset + k for e in self.entries for k in e.keep]
            starts, ends = [], []
            for lo, hi in zip([0, *(k + 1 for k in kept)], [*kept, self.horizon]):
                if lo < hi:
                    starts.append(lo)
                    ends.append(hi)
            self._gaps = starts, ends
        starts, ends = self._gaps
        if start >= end:
            return []
        i, j = bisect_right(ends, start), bisect_left(starts, end)
        out = list(zip(starts[i:j], ends[i:j]))
        if out:
            out[0] = (max(out[0][0], start), out[0][1])
            out[-1] = (out[-1][0], min(out[-1][1], end))
        return out

    def entry_at(self, base: int) -> ViewEntry | None:
        from bisect import bisect_left

        i = bisect_left(self._bases, base)
        return self.entries[i] if i < len(self._bases) and self._bases[i] == base else None


@dataclass(frozen=True, slots=True)
class ViewState:
    """What the ``keyview`` record says (and its version, for the CAS)."""

    horizon: int = 0
    object: str | None = None
    records: int = 0
    entries: int = 0
    size: int = 0
    built_ms: int = 0
    stream_size: int = 0  # the stream's cumulative size at the horizon (for backlog thresholds)
    version: int | None = None

    def to_json(self) -> dict:
        return {"horizon": self.horizon, "object": self.object, "records": self.records, "entries": self.entries,
                "size": self.size, "built": self.built_ms, "stream_size": self.stream_size}


async def state(meta: MetadataStore, stream_id: int) -> ViewState:
    rec = await meta.get(view_key(stream_id), partition_key=records.stream_partition(stream_id))
    if rec is None:
        return ViewState()
    v = records.decode(rec.value)
    return ViewState(v.get("horizon", 0), v.get("object"), v.get("records", 0), v.get("entries", 0),
                     v.get("size", 0), v.get("built", 0), v.get("stream_size", 0), rec.version.version_id)


def decode_view(stream_id: int, horizon: int, key: str | None, data: bytes | memoryview | None) -> KeyView:
    """A view object's entries (raises CorruptObject if it is not one)."""
    if key is None or data is None:
        return KeyView(stream_id, horizon, key)
    try:
        table = read_parquet(data)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptObject(f"unreadable key view {key}: {exc}") from None
    if table.schema.names != SCHEMA.names:
        raise CorruptObject(f"{key} is not a key view")
    offsets = table.column("offset").to_pylist()
    bases = table.column("entry_base").to_pylist()
    counts = table.column("entry_records").to_pylist()
    blobs = table.column("entry").combine_chunks()
    out: list[ViewEntry] = []
    current: tuple[int, int, memoryview] | None = None
    keep: list[int] = []
    for i, (offset, base, count) in enumerate(zip(offsets, bases, counts)):
        if current is None or base != current[0]:
            if current is not None:
                out.append(ViewEntry(FetchedEntry(current[0], current[1], current[2]), tuple(keep)))
            blob = blobs[i]
            if not blob.is_valid:
                raise CorruptObject(f"key view {key}: the entry at {base} has no bytes")
            current, keep = (base, count, memoryview(blob.as_buffer()).cast("B")), []
        keep.append(offset - base)
    if current is not None:
        out.append(ViewEntry(FetchedEntry(current[0], current[1], current[2]), tuple(keep)))
    return KeyView(stream_id, horizon, key, out)


async def load(meta: MetadataStore, objects: ObjectStore, stream_id: int,
               current: ViewState | None = None) -> tuple[ViewState, KeyView]:
    """The view in force (an empty one at horizon 0 when none was built)."""
    st = current or await state(meta, stream_id)
    data = await objects.get(st.object) if st.object else None
    loop = asyncio.get_running_loop()
    view = await loop.run_in_executor(None, decode_view, stream_id, st.horizon, st.object, data)
    return st, view


class KnownKeysMismatch(StorageError):
    """Known keys name an entry the stream does not have (nothing was switched in)."""


@dataclass(frozen=True, slots=True)
class BuildResult:
    stream_id: int
    horizon: int
    object: str | None
    input_bytes: int
    input_records: int
    records: int
    size: int


async def build(meta: MetadataStore, objects: ObjectStore, reader: StreamReader, stream_id: int,
                extract: KeyExtractor, *, horizon: int, delete_retention_ms: int = DELETE_RETENTION_MS,
                lease_owner: str | None = None, now_ms: int | None = None, stream_size: int = 0,
                shrink: EntryShrinker | None = None, extract_many: EntriesKeyExtractor | None = None,
                known: list[KnownKeys] | None = None) -> BuildResult:
    """Build the view up to ``horizon`` (an entry boundary, at most the committed end) and switch to it.

    ``stream_size``: the stream's cumulative size at ``horizon`` (recorded for backlog checks).
    ``shrink``: reduces an entry that lost records to its survivors (see ``merge``).
    ``extract_many``: used instead of ``extract`` when given (many entries per call).
    ``known``: keys of ranges the build takes as they are instead of reading the entries
    (with ``extract_many`` only); it then reads only the entries whose records survive.

    Raises CompactionConflict if the view changed meanwhile or the lease was lost.
    The caller holds the stream's compaction lease (``compaction_lease.lease``).
    """
    before = await state(meta, stream_id)
    if horizon <= before.horizon:
        return BuildResult(stream_id, before.horizon, before.object, 0, 0, before.records, before.size)
    previous = None
    if before.object:
        data = await objects.get(before.object)
        previous = read_parquet(data)
    start_rec = await meta.get(records.start_key(stream_id), partition_key=records.stream_partition(stream_id))
    start = records.decode(start_rec.value).get("start", 0) if start_rec is not None else 0
    new = await _read_input(reader, stream_id, max(before.horizon, start), horizon, extract, extract_many, known)
    loop = asyncio.get_running_loop()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    table = await loop.run_in_executor(
        None, lambda: merge(previous, new, now_ms=now, delete_retention_ms=delete_retention_ms, shrink=shrink))
    data = await loop.run_in_executor(None, encode, table) if table.num_rows else None
    key = None
    if data is not None:
        key = (f"keyview/{stream_id:0{records.OFFSET_WIDTH}d}/{horizon:0{records.OFFSET_WIDTH}d}"
               f"-{uuid.uuid4().hex[:8]}.parquet")
    entries = len(set(table.column("entry_base").to_pylist())) if table.num_rows else 0
    after = ViewState(horizon, key, table.num_rows, entries, len(data) if data else 0, now, stream_size)
    await _switch(meta, objects, stream_id, before, after, data, lease_owner)
    log.info("stream %d: key view up to %d: %d records in (%d bytes), %d kept (%d bytes)", stream_id, horizon,
             new.records, new.bytes, table.num_rows, after.size)
    return BuildResult(stream_id, horizon, key, new.bytes, new.records, table.num_rows, after.size)


async def _read_input(reader: StreamReader, stream_id: int, offset: int, horizon: int, extract: KeyExtractor,
                      extract_many: EntriesKeyExtractor | None, known: list[KnownKeys] | None) -> BuildInput:
    """The records of the entries that begin in ``[offset, horizon)`` and their keys: extracted
    off the event loop, or taken from ``known`` where it covers a range (then only the
    entries whose records survive are read)."""
    new = BuildInput()
    loop = asyncio.get_running_loop()
    pending: list[FetchedEntry] = []
    pending_bytes = 0
    extracting: list[asyncio.Future] = []  # the reduced keys of ranges being read

    def add(got: list[FetchedEntry]) -> None:
        for entry in got:
            new.add(entry, extract)

    async def extract_pending() -> None:
        nonlocal pending, pending_bytes
        while len(extracting) >= _EXTRACT_PARALLEL:
            await loop.run_in_executor(None, new.add_keys, *await extracting.pop(0), True)
        new.add_entries(pending)
        extracting.append(loop.run_in_executor(None, latest_of, extract_many, pending))
        pending, pending_bytes = [], 0

    known_rows: list[tuple[int, pa.Table, int]] = []  # (first entry wanted, rows, records)

    # A range reaching past the horizon cannot be cut there (a key's latest row below it
    # may be gone); cut below, it can: keys not updated past the cut have no row past it.
    chunks = sorted((k for k in known or () if extract_many is not None and offset < k[1] <= horizon),
                    key=lambda k: k[0])
    while offset < horizon:
        while chunks and chunks[0][1] <= offset:
            chunks.pop(0)
        if chunks and chunks[0][0] <= offset:  # the latest rows of the entries that begin in [offset, hi)
            lo, hi, rows, count = chunks.pop(0)
            known_rows.append((offset, rows, count if lo >= offset else min(count, hi - offset)))
            offset = hi
            continue
        got = await reader.read(stream_id, offset, chunks[0][0] if chunks else horizon, _READ_BYTES,
                                fill_cache=False)
        if not got:
            break
        got, offset = _new_entries(stream_id, got, offset, horizon), got[-1].end_offset
        if extract_many is None:
            # Off the event loop: decoding a large range must not stall the broker (nor
            # its metadata session, which holds the compaction lease).
            await loop.run_in_executor(None, add, got)
            continue
        pending += got
        pending_bytes += sum(len(e.data) for e in got)
        if pending_bytes >= _EXTRACT_BYTES:
            await extract_pending()
    if pending:
        await extract_pending()
    for future in extracting:
        await loop.run_in_executor(None, new.add_keys, *await future, True)
    if known_rows:  # already reduced run by run: joined in one pass
        new.add_entries([])
        await loop.run_in_executor(None, lambda: new.add_keys(
            pa.concat_tables([_entries_from(rows, lo) for lo, rows, _ in known_rows]),
            sum(count for _, _, count in known_rows), True))
        await _read_survivors(reader, stream_id, horizon, new)
    return new


def _new_entries(stream_id: int, got: list[FetchedEntry], offset: int, horizon: int) -> list[FetchedEntry]:
    """The entries of ``got`` that begin at or after ``offset`` (those below are in the previous view)."""
    out = []
    for entry in got:
        if entry.base_offset < offset:
            continue
        if entry.end_offset > horizon:
            raise StorageError(f"stream {stream_id}: horizon {horizon} is inside the entry at {entry.base_offset}")
        out.append(entry)
    return out


def _entries_from(rows: pa.Table, lo: int) -> pa.Table:
    """The rows of the entries that begin at or after ``lo``."""
    inside = columns.numpy(rows.column("entry_base")) >= lo
    return rows if inside.all() else rows.filter(columns.array(inside, pa.bool_()))


async def _switch(meta: MetadataStore, objects: ObjectStore, stream_id: int, before: ViewState, after: ViewState,
                  data: bytes | None, lease_owner: str | None) -> None:
    """Put the new view's object (``data``; None: an empty view) and switch the ``keyview`` record
    from ``before`` to ``after`` by one CAS, then release the previous view's object.

    The pending marker written first lets the collector finish or undo a builder that dies
    on the way. Raises CompactionConflict (the new object released) if the record changed
    meanwhile or the lease was lost.
    """
    key, now = after.object, after.built_ms
    marker = records.gc_pending_key(key) if key else None
    if key is not None:
        await meta.put(marker, records.encode({"ts": now, "kind": MARKER_KIND, "object": key, "stream": stream_id,
                                               "previous": before.object}))
        await metrics.put_object(objects, key, data, "keyview")
        await gc.seal(meta, key, [(stream_id, VIEW_REF)])
    try:
        if lease_owner is not None:
            await check_lease(meta, stream_id, lease_owner)
        await meta.put(view_key(stream_id), records.encode(after.to_json()),
                       expected_version_id=EXPECT_ABSENT if before.version is None else before.version,
                       partition_key=records.stream_partition(stream_id))
    except (UnexpectedVersion, CompactionConflict) as exc:
        if key is not None:
            await meta.put(marker, records.encode({"ts": now, "kind": MARKER_KIND, "object": key, "stream": stream_id,
                                                   "aborted": True}))
            await gc.release(meta, key, [(stream_id, VIEW_REF)])
            await meta.delete(marker)
        if isinstance(exc, CompactionConflict):
            raise
        raise CompactionConflict(f"stream {stream_id}: its key view changed meanwhile") from None
    if before.object:
        await gc.release(meta, before.object, [(stream_id, VIEW_REF)])
    if marker is not None:
        await meta.delete(marker)


async def _read_survivors(reader: StreamReader, stream_id: int, horizon: int, new: BuildInput) -> None:
    """Read the entries of ``new``'s surviving rows that came from known keys (near ones
    together: survivors cluster at the end of what a build covers)."""
    wanted: set[int] = set()
    for table in (*new.tables, *([new.latest] if new.latest is not None else [])):
        wanted.update(pc.unique(table.column("entry_base")).to_pylist())
    missing = sorted(wanted - new.entries.keys())
    spans: list[list[int]] = []
    for base in missing:
        if spans and base - spans[-1][1] <= _SURVIVOR_GAP:
            spans[-1][1] = base
        else:
            spans.append([base, base])
    for lo, last in spans:
        offset = lo
        while offset <= last:
            got = await reader.read(stream_id, offset, min(horizon, last + 1), _READ_BYTES, fill_cache=False)
            if not got:
                raise KnownKeysMismatch(f"stream {stream_id}: no entry at {offset} below {horizon} (recorded keys "
                                        "disagree)")
            for entry in got:
                if entry.base_offset in wanted and entry.base_offset not in new.entries:
                    new.entries[entry.base_offset] = entry.data
                    new.bytes += len(entry.data)
            offset = got[-1].end_offset
    absent = [b for b in missing if b not in new.entries]
    if absent:
        raise KnownKeysMismatch(f"stream {stream_id}: no entry begins at {absent[0]} (recorded keys disagree)")


async def resolve_marker(meta: MetadataStore, marker_key: str, value: dict) -> None:
    """Finish or undo the view change of a builder that died (called by the collector)."""
    name, stream_id = value["object"], value["stream"]
    current = await state(meta, stream_id)
    if not value.get("aborted") and current.object == name:
        if value.get("previous"):
            await gc.release(meta, value["previous"], [(stream_id, VIEW_REF)])
        log.info("gc: finishing the key view %s of stream %d", name, stream_id)
    else:
        record = await meta.get(records.object_key(name))
        if record is not None and records.decode(record.value).get("state") == "sealed":
            await gc.release(meta, name, [(stream_id, VIEW_REF)])
        else:
            await gc.seal(meta, name, [])
        log.info("gc: undoing the key view %s of stream %d (never switched in)", name, stream_id)
    await meta.delete(marker_key)


async def drop(meta: MetadataStore, stream_id: int) -> None:
    """Release the stream's view (the stream is being deleted)."""
    st = await state(meta, stream_id)
    if st.object:
        await gc.release(meta, st.object, [(stream_id, VIEW_REF)])


__all__ = ["BuildResult", "DELETE_RETENTION_MS", "EntriesKeyExtractor", "EntryKeys", "EntryShrinker", "KEY_SCHEMA",
           "KeyExtractor", "KeyView", "KnownKeys", "KnownKeysMismatch", "MARKER_KIND", "ViewEntry", "ViewState",
           "build", "decode_view", "drop", "latest_rows", "load", "merge", "resolve_marker", "state", "view_key"]
