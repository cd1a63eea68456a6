"""Compaction by generation replacement: a run of WAL slices becomes one object.

The protocol for one stream range ``[first, last]`` made of whole ``idx`` groups
G1..Gk (all below ``tail.pending``, so no writer touches them):

1. the caller holds the stream's compaction lease (``compaction_lease``: one compactor per
   stream at a time, from planning to the end of its plans);
2. read the slices of G1..Gk (checked) and encode them as one compacted object
   (``compacted_format``; the caller adds the table columns), then decode it again
   and compare: the object must give back every entry byte for byte;
3. write a pending marker ``/nereus/gc/pending/{object}`` that describes the
   change (so a crash at any later point leaves a metadata trace), put the object
   (put-if-absent) and seal its reference record with ``[stream, first]``;
4. COMMIT: one CAS on ``idx/{last}`` (the key of Gk, expected version as read)
   to ``{slices: [compacted entry, generation g+1], replaced: [old slices]}``.
   That single write is the switch: before it readers see only the old slices,
   after it they meet the compacted entry first or after the leftover G1..Gk-1
   (whole entries line up across generations, the reader skips what it has);
5. finish: delete G1..Gk-1 (CAS on their versions), release the replaced
   slices' references (the WAL objects become collectable when no slice, pin or
   other generation refers to them), delete the marker.

Offsets never change: the compacted entry covers exactly the offsets of the
slices it replaces.

Merges (``plan(merge_below=...)``): a run of adjacent small compacted objects becomes one
larger object the same way (its groups are compacted groups, its generation one above
theirs), so a stream compacted every few seconds for freshness does not keep a small
object per run. The merged entry records the stream size before it (``before``): the
entries it replaced keep no fallback of their own. A caller's ``merge`` builds the merged
object from the small objects' bytes (no entry decoded); its output is checked against
their entries like the encoder's. A caller may run step 5 later (``finish_now=False``),
after it has made the change visible elsewhere (a table commit); until then, index
readers meet the leftover groups first and skip what the compacted entry repeats.
A crash before 4 leaves no visible change (the collector
frees the orphan object from the marker); a crash after 4 leaves the complete
change, and the collector finishes step 5 from the marker (``resolve_marker``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ..meta import MetadataStore, UnexpectedVersion
from ..objstore import ObjectNotFound, ObjectStore
from . import compacted_format, gc, metrics, records
from .compaction_lease import check_lease
from .errors import CompactionConflict, StorageError
from .reader import StreamReader
from .records import IndexEntry, Tail

log = logging.getLogger(__name__)

#: The ``kind`` of compaction's pending markers (resolved by ``resolve_marker``).
MARKER_KIND = "compaction"
#: Default size of the WAL input of one compacted object.
TARGET_BYTES = 32 << 20
#: At most this many slices per compacted object: the replaced slices are listed in
#: its idx value and its marker, and released one reference update each.
MAX_SLICES = 1024
#: A merge replaces at least this many small compacted objects (fewer: not worth a rewrite).
MIN_MERGE = 4
#: Reference updates in flight at once when releasing the replaced slices.
RELEASE_CONCURRENCY = 64

Entries = list[tuple[int, memoryview]]
#: Builds the Parquet bytes of a range: (stream id, first offset, entries, generation) -> bytes.
Encoder = Callable[[int, int, Entries, int], bytes]
#: Builds the Parquet bytes of a merge from the merged objects' bytes, without decoding their
#: entries: (stream id, first offset, objects, generation) -> bytes, or None if it cannot
#: (the range is then encoded from its entries).
Merger = Callable[[int, int, list[bytes], int], bytes | None]


@dataclass(frozen=True, slots=True)
class Group:
    key: str
    version: int
    entries: tuple[IndexEntry, ...]


@dataclass(frozen=True, slots=True)
class CompactionPlan:
    """A run of whole ``idx`` groups of one stream, to become one object: WAL slices, or small
    compacted objects to merge."""

    stream_id: int
    groups: tuple[Group, ...]

    @property
    def first(self) -> int:
        return self.groups[0].entries[0].base

    @property
    def last(self) -> int:
        return self.groups[-1].entries[-1].last

    @property
    def slices(self) -> list[IndexEntry]:
        return [e for g in self.groups for e in g.entries]

    @property
    def input_bytes(self) -> int:
        return sum(e.length for e in self.slices)

    @property
    def merges(self) -> bool:
        """Whether the plan merges compacted objects (rather than compacting WAL slices)."""
        return all(e.compacted for e in self.slices)


@dataclass(frozen=True, slots=True)
class CompactionResult:
    stream_id: int
    first: int
    last: int
    object: str
    input_bytes: int
    output_bytes: int
    generation: int
    #: Step 5, when the caller asked to run it later (``finish_now=False``): readers already see
    #: the change; until it runs, the replaced groups and slices stay (the collector runs it if
    #: the caller dies first).
    finishing: Callable[[], Awaitable[None]] | None = None


async def plan(meta: MetadataStore, stream_id: int, *, target_bytes: int = TARGET_BYTES,
               min_bytes: int = 1, max_age_seconds: float | None = None,
               stable_offset: int | None = None, merge_below: int = 0) -> list[CompactionPlan]:
    """Runs of uncompacted groups below ``tail.pending``, about ``target_bytes`` each.

    ``stable_offset``: the stream's last stable offset, read after its tail (the
    transaction layer knows it): nothing at or past it is planned, since an open
    transaction there may still abort and its records must then give no rows.

    A run ends at a compacted group; the last run is kept only if it has at least
    ``min_bytes``, or its oldest slice was committed ``max_age_seconds`` ago (small
    tails wait for more data, but not for ever). ``merge_below`` (bytes, 0: no merges):
    runs of at least ``MIN_MERGE`` adjacent compacted objects of one generation, each
    smaller than it, up to ``target_bytes`` together, are planned as merges (tiers: a
    byte is rewritten once per generation, not at every run).
    """
    oldest_ms = None if max_age_seconds is None else time.time() * 1000 - max_age_seconds * 1000
    partition = records.stream_partition(stream_id)
    tail_rec = await meta.get(records.tail_key(stream_id), partition_key=partition)
    if tail_rec is None:
        return []
    tail = Tail.decode(tail_rec.value)
    limit = tail.pending[0].base if tail.pending else tail.next
    if stable_offset is not None:
        limit = min(limit, stable_offset)
    start_rec = await meta.get(records.start_key(stream_id), partition_key=partition)
    start = records.decode(start_rec.value).get("start", 0) if start_rec is not None else 0
    lo, hi = records.index_range(stream_id, start)
    plans: list[CompactionPlan] = []
    run: list[Group] = []
    size = 0
    merge: list[Group] = []  # adjacent small compacted groups
    merge_size = 0

    def close_merge() -> None:
        nonlocal merge, merge_size
        if len(merge) >= MIN_MERGE:
            plans.append(CompactionPlan(stream_id, tuple(merge)))
        merge, merge_size = [], 0

    def close(force: bool) -> None:
        nonlocal run, size
        old = oldest_ms is not None and run and run[0].entries[0].timestamp <= oldest_ms
        if run and (force or size >= min_bytes or old):
            plans.append(CompactionPlan(stream_id, tuple(run)))
        run, size = [], 0

    async for rec in meta.range_scan(lo, hi, partition_key=partition):
        entries = records.decode_group(rec.value)
        if not entries or entries[-1].last >= limit:
            break
        if any(e.compacted for e in entries):
            # Groups it replaced may still be there (a compactor died before removing
            # them; the collector finishes that): never plan them again.
            covered = entries[0].base
            run = [g for g in run if g.entries[-1].last < covered]
            size = sum(e.length for g in run for e in g.entries)
            plans[:] = [p for p in plans if p.last < covered]
            merge = [g for g in merge if g.entries[-1].last < covered]
            merge_size = sum(g.entries[0].length for g in merge)
            close(True)
            group = Group(rec.key, rec.version.version_id, tuple(entries))
            small = (merge_below > 0 and len(entries) == 1 and entries[0].compacted and entries[0].base >= start
                     and entries[0].length < merge_below)
            if not (small and merge and merge[-1].entries[-1].last + 1 == entries[0].base
                    and merge[-1].entries[0].generation == entries[0].generation
                    and merge_size + entries[0].length <= target_bytes and len(merge) < MAX_SLICES):
                close_merge()
            if small:
                merge.append(group)
                merge_size += entries[0].length
            continue
        close_merge()
        if entries[0].base < start:
            close(True)  # partly trimmed: a run cannot cross it
            continue
        if run and entries[0].base <= run[-1].entries[-1].last:
            # Overlapping groups (written by an older version after a session change):
            # compacting both would put the same records in two objects; leave them.
            run = [g for g in run if g.entries[-1].last < entries[0].base]
            close(True)
            continue
        if run and run[-1].entries[-1].last + 1 != entries[0].base:
            close(True)  # a gap (a concurrent trim): runs must be contiguous
        if run and sum(len(g.entries) for g in run) + len(entries) > MAX_SLICES:
            close(True)
        run.append(Group(rec.key, rec.version.version_id, tuple(entries)))
        size += sum(e.length for e in entries)
        if size >= target_bytes:
            close(True)
    close(False)
    close_merge()
    return plans


async def compact(meta: MetadataStore, objects: ObjectStore, reader: StreamReader, job: CompactionPlan,
                  encode: Encoder, *,
                  encode_in: Callable[[Callable[[], bytes]], Awaitable[bytes]] | None = None,
                  lease_owner: str | None = None, merge: Merger | None = None,
                  finish_now: bool = True) -> CompactionResult:
    """Carry out one plan (steps 2-5 of the module docstring); raises CompactionConflict.

    ``merge``: how a merge plan's objects become one without decoding their entries (checked
    against them as the encoder's output is). ``finish_now=False``: return right after the
    switch, with step 5 as the result's ``finishing`` (a caller that makes the change visible
    elsewhere first, such as a table commit).

    ``lease_owner``: the lease holder this work runs for (a job's task runs apart
    from the job's driver, which holds the lease); checked again just before the
    switch, so work orphaned by a dead driver stops instead of racing its successor.
    """
    await _check_unchanged(meta, job)
    replaced = job.slices
    generation = max(e.generation for e in replaced) + 1
    run = encode_in or _in_executor
    merging = any(e.compacted for e in replaced)
    merged = None
    if merge is not None and job.merges:
        merged = await _merged(reader.objects, job, merge, generation, run)
    if merged is not None:
        data, entry_count = merged
    else:
        blocks = await reader.load_slices(job.stream_id, replaced)
        entries: Entries = [item for block in blocks for item in block]
        data = await run(lambda: _encode_checked(encode, job, entries, generation))
        entry_count = len(entries)
    key = (f"compacted/{job.stream_id:0{records.OFFSET_WIDTH}d}/"
           f"{job.first:0{records.OFFSET_WIDTH}d}-{job.last:0{records.OFFSET_WIDTH}d}"
           f"-g{generation}-{uuid.uuid4().hex[:8]}.parquet")
    entry = IndexEntry(key, 0, len(data), job.first, job.last - job.first + 1, entry_count, replaced[-1].size,
                       generation=generation, timestamp=max(e.timestamp for e in replaced),
                       before=replaced[0].size_before if merging else None)
    marker = records.gc_pending_key(key)
    await meta.put(marker, records.encode({
        "ts": int(time.time() * 1000), "kind": MARKER_KIND, "object": key, "stream": job.stream_id,
        "first": job.first, "last": job.last, "groups": [g.key for g in job.groups],
        "replaced": [[e.object, e.base] for e in replaced]}))
    await metrics.put_object(objects, key, data, "compacted")
    await gc.seal(meta, key, [(job.stream_id, job.first)])
    partition = records.stream_partition(job.stream_id)
    try:
        if lease_owner is not None:
            await check_lease(meta, job.stream_id, lease_owner)
        await meta.put(job.groups[-1].key, records.encode_compacted_group(entry, replaced),
                       expected_version_id=job.groups[-1].version, partition_key=partition)
    except (UnexpectedVersion, CompactionConflict) as exc:
        # Mark the change aborted before freeing the object: a crash in between
        # must not let the collector take it for a landed change.
        await meta.put(marker, records.encode({"ts": int(time.time() * 1000), "kind": MARKER_KIND,
                                               "object": key, "stream": job.stream_id, "first": job.first,
                                               "aborted": True}))
        await gc.release(meta, key, [(job.stream_id, job.first)])
        await meta.delete(marker)
        if isinstance(exc, CompactionConflict):
            raise
        raise CompactionConflict(f"stream {job.stream_id}: [{job.first}, {job.last}] changed") from None
    log.info("stream %d: compacted [%d, %d] (%d slices, %d -> %d bytes) into %s", job.stream_id, job.first,
             job.last, len(replaced), job.input_bytes, len(data), key)
    try:
        if not merging:  # a merge rewrites what was counted already
            await metrics.record_compaction(meta, job.input_bytes, len(data))
    except Exception as exc:  # the range is compacted; only the progress series misses it
        log.warning("stream %d: recording compaction progress failed: %s", job.stream_id, exc)

    async def finishing() -> None:
        await finish(meta, job.stream_id, [(g.key, g.version) for g in job.groups[:-1]],
                     [(e.object, e.base) for e in replaced], marker)

    if finish_now:
        await finishing()
    return CompactionResult(job.stream_id, job.first, job.last, key, job.input_bytes, len(data), generation,
                            None if finish_now else finishing)


async def finish(meta: MetadataStore, stream_id: int, leftovers: list[tuple[str, int | None]],
                 replaced: list[tuple[str, int]], marker: str) -> None:
    """Step 5: drop the replaced groups and their references, then the marker (idempotent)."""
    partition = records.stream_partition(stream_id)
    limit = asyncio.Semaphore(RELEASE_CONCURRENCY)

    async def delete(key: str, version: int | None) -> None:
        async with limit:
            try:
                await meta.delete(key, expected_version_id=version, partition_key=partition)
            except UnexpectedVersion:
                pass  # trimmed (or otherwise replaced) meanwhile: its new owner releases it

    await asyncio.gather(*(delete(key, version) for key, version in leftovers))
    by_object: dict[str, list[tuple[int, int]]] = {}
    for obj, base in replaced:
        by_object.setdefault(obj, []).append((stream_id, base))

    async def release(obj: str, pairs: list[tuple[int, int]]) -> None:
        async with limit:
            await gc.release(meta, obj, pairs)

    await asyncio.gather(*(release(obj, pairs) for obj, pairs in by_object.items()))
    await meta.delete(marker)


async def resolve_marker(meta: MetadataStore, marker_key: str, value: dict) -> None:
    """Finish or undo a compaction whose compactor died (called by the collector).

    The switch landed iff ``idx/{last}`` names the compacted object, or the
    object's reference was released since (a trim removed the landed group).
    """
    name, stream_id, first = value["object"], value["stream"], value["first"]
    pair = [stream_id, first]
    record = await meta.get(records.object_key(name))
    state = records.decode(record.value) if record is not None else {}
    landed = False
    if not value.get("aborted"):
        rec = await meta.get(records.index_key(stream_id, value["last"]),
                             partition_key=records.stream_partition(stream_id))
        if rec is not None and any(e.object == name for e in records.decode_group(rec.value)):
            landed = True
        elif state.get("state") == "sealed" and pair not in state["live"]:
            landed = True
    if landed:
        log.info("gc: finishing the compaction of stream %d into %s", stream_id, name)
        await finish(meta, stream_id, [(k, None) for k in value["groups"][:-1]],
                     [tuple(r) for r in value["replaced"]], marker_key)
        return
    log.info("gc: undoing the compaction of stream %d into %s (it never became visible)", stream_id, name)
    if state.get("state") == "sealed":
        await gc.release(meta, name, [tuple(pair)])
    else:
        await gc.seal(meta, name, [])  # never sealed: nothing refers to it
    await meta.delete(marker_key)


def _encode_checked(encode: Encoder, job: CompactionPlan, entries: Entries, generation: int) -> bytes:
    data = encode(job.stream_id, job.first, entries, generation)
    if not compacted_format.holds_entries(data, job.stream_id, job.first, entries):
        raise StorageError(f"stream {job.stream_id}: the compacted object does not give back its entries")
    return data


async def _merged(objects: ObjectStore, job: CompactionPlan, merge: Merger, generation: int,
                  run) -> tuple[bytes, int] | None:
    """A merge plan's object from its objects' bytes (``merge``) and its entry count, checked: it must
    give back the entries of the objects it merges. None if an object is missing (the reader then
    falls back to the slices it replaced) or ``merge`` cannot."""
    replaced = job.slices
    try:
        sources = list(await asyncio.gather(*(objects.get(e.object, e.position, e.position + e.length)
                                              for e in replaced)))
    except ObjectNotFound:
        return None

    def merge_checked() -> tuple[bytes, int] | None:
        data = merge(job.stream_id, job.first, sources, generation)
        if data is None:
            return None
        count = compacted_format.merged_entries(data, job.stream_id, job.first,
                                                [(s, e.base, e.records) for s, e in zip(sources, replaced)])
        if count is None:
            raise StorageError(f"stream {job.stream_id}: the merged object does not give back its entries")
        return data, count

    return await run(merge_checked)


async def _in_executor(fn: Callable[[], bytes]) -> bytes:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


async def _check_unchanged(meta: MetadataStore, job: CompactionPlan) -> None:
    """Every group of the plan is still there as planned (one scan: a plan's groups are adjacent keys)."""
    partition = records.stream_partition(job.stream_id)
    planned = {g.key: g.version for g in job.groups}
    found = {}
    async for rec in meta.range_scan(job.groups[0].key, job.groups[-1].key + "\x01", partition_key=partition):
        found[rec.key] = rec.version.version_id
    for key, version in planned.items():
        if found.get(key) != version:
            raise CompactionConflict(f"stream {job.stream_id}: group {key} changed since planning")


__all__ = ["CompactionPlan", "CompactionResult", "MARKER_KIND", "TARGET_BYTES", "compact", "finish", "plan",
           "resolve_marker"]


def compacted_stream_id(object_key: str) -> int | None:
    """The stream a compacted object holds (from its key), or None for another kind of object."""
    kind, _, rest = object_key.partition("/")
    stream, _, _ = rest.partition("/")
    return int(stream) if kind == "compacted" and stream.isdigit() else None
