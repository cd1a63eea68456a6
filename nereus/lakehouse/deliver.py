"""Stream delivered tables: copy a topic's committed records into an external table, exactly once.

A *target* (``delta_target.DeltaTarget``, ``hudi_target.HudiTarget``,
``iceberg_target.IcebergTarget``) is a table
that stores, in the same commit as the rows, how far each partition was delivered: a
``Position(start, end)`` meaning "the table holds this partition's records of offsets
``[start, end)``". The job keeps no state of its own: every round starts by reading the
positions back from the table's latest commit (the repair step after a crash: a commit
that did not land left at most unreferenced files, and the positions say where to
resume), then

1. retention: partitions whose committed start (trim) moved past ``Position.start``
   get their rows below the new start deleted, with the new start recorded in that
   same delete commit;
2. delivery: rows of ``[Position.end, LSO)`` are read with ``rows.read_rows`` (the
   last stable offset seen when the round was planned: rows of committed records only) and appended in batches of ``batch_records``,
   each batch committed together with the new positions of the partitions it covers.

Records are immutable at their offsets, so re-reading from a recorded position after a
crash yields exactly the rows that were not committed: nothing is duplicated or skipped.

A commit that loses a race with another writer raises ``TargetConflict`` (targets commit
without rebasing) and the round is planned again from the table's new positions.

Upsert tables (``upsert=True``, for key-compacted topics): the table holds one row per
``(topic, partition, key)``, the record with the highest offset; a record with no value
(a tombstone) deletes its key's row. Each batch is reduced to its latest record per key
(``latest_per_key``) and merged in one commit with the positions; records without a key
cannot be upserted and are counted, not delivered.

Schema columns (``schema_columns=True``, ``delivered_columns``): rows carry the topic's
schema fields; records that do not decode go to the ``dead_letter`` target, committed
before the rows with the same positions, so a re-run skips the dead letters it finds there.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Protocol

import pyarrow as pa

from ..meta import MetadataError, MetadataStore
from ..objstore import ObjectStore
from ..storage.errors import StorageError
from . import rows as _rows
from .delivered_columns import ARROW_SCHEMA, DEAD_LETTER_SCHEMA, DecodedValues, plan_columns
from .rows import TopicNotFound
from .wal_access import WalAccess
from ..tasks import wait_for

log = logging.getLogger(__name__)

DEFAULT_BATCH_RECORDS = 50_000
_MAX_ATTEMPTS = 5  # failed rounds in a row (conflicts, concurrent trims) before giving up


@dataclass(frozen=True, slots=True)
class Position:
    """The table holds the partition's records of offsets ``[start, end)``."""

    start: int
    end: int


class TargetConflict(Exception):
    """Another writer committed to the table first; nothing of this commit landed."""


class TargetError(Exception):
    """The table cannot be used as a delivery target (bad location, foreign schema, ...)."""


class Target(Protocol):
    """A table that commits rows and delivered positions atomically."""

    description: str

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, Position]:
        """Positions recorded by the table's latest commit (absent: never delivered)."""

    def append(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        """Append ``rows`` (possibly none) and record ``positions`` in one commit."""

    def upsert(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        """Replace the rows of the keys of ``rows`` (one per partition and key) by ``rows``, without
        those whose value is null (deleted keys), and record ``positions``, in one commit."""

    def delete_below(self, topic: str, positions: Mapping[int, Position]) -> None:
        """Delete each partition's rows with offset < ``start``; record ``positions`` with the delete."""

    def close(self) -> None:
        """Release the table's resources."""


def to_arrow(rows: Sequence[tuple], schema: pa.Schema = ARROW_SCHEMA) -> pa.Table:
    """Rows (of ``rows.read_rows``, schema columns after them) as a table of ``schema``."""
    columns = list(zip(*rows)) if rows else [()] * len(schema)
    arrays = []
    for field, values in zip(schema, columns):
        if field.name == "properties":  # a dict per row; Arrow takes a map as (key, value) pairs
            values = [None if v is None else list(v.items()) for v in values]
        arrays.append(pa.array(values, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def latest_per_key(rows: pa.Table) -> tuple[pa.Table, int]:
    """The record with the highest offset of each ``(partition, key)`` of ``rows``, and the number
    of records without a key (left out)."""
    import pyarrow.compute as pc

    keyed = rows.filter(pc.is_valid(rows["key"]))
    parts = []
    for partition in pc.unique(keyed["partition"]).to_pylist():
        part = keyed.filter(pc.equal(keyed["partition"], partition))
        latest = part.group_by("key").aggregate([("offset", "max")])["offset_max"]
        parts.append(part.filter(pc.is_in(part["offset"], value_set=latest)))
    latest_rows = pa.concat_tables(parts) if parts else rows.schema.empty_table()
    return latest_rows, rows.num_rows - keyed.num_rows


class _Dead(tuple):
    """A row (fixed columns, reason, schema version) for the dead-letter table."""

    __slots__ = ()


# Test hook: the crash tests kill the job at exact points of its commit cycle with
# NEREUS_DELIVER_KILL_AT=point:n (the n-th time the point is passed, n >= 1).
_KILL_AT = os.environ.get("NEREUS_DELIVER_KILL_AT", "")
_passed: dict[str, int] = {}


def _kill_point(point: str) -> None:
    if not _KILL_AT:
        return
    _passed[point] = _passed.get(point, 0) + 1
    if _KILL_AT == f"{point}:{_passed[point]}":
        os.kill(os.getpid(), signal.SIGKILL)


def _from(todo: _rows.StreamRange, raw_start: int) -> _rows.StreamRange:
    """The part of ``todo`` the raw stream still holds."""
    return replace(todo, start=max(todo.start, raw_start))


@dataclass(slots=True)
class _Partition:
    range: _rows.StreamRange  # committed bounds when the round was planned
    position: Position  # what the table says, with retention applied: where new rows start
    delete: bool  # rows below position.start may be in the table


@dataclass(slots=True)
class Stats:
    """What one ``deliver_once`` did."""

    records: int = 0
    offsets: int = 0
    keyless: int = 0  # upsert tables: records without a key, not delivered
    dead: int = 0  # schema columns: records whose value is not a record of the schema (dead letters)
    commits: int = 0
    deletes: int = 0


class Delivery:
    """Delivers one topic to one target; ``deliver_once`` per round."""

    def __init__(self, meta: MetadataStore, objects: ObjectStore, topic: str, target: Target, *,
                 batch_records: int = DEFAULT_BATCH_RECORDS, upsert: bool = False,
                 schema_columns: bool = False, dead_letter: Target | None = None,
                 on_plan: Callable[[int], None] | None = None,
                 on_progress: Callable[[int, int], None] | None = None,
                 wal_access: WalAccess | None = None) -> None:
        if batch_records < 1:
            raise ValueError("batch_records must be >= 1")
        self.meta = meta
        self.objects = objects
        self.topic = topic
        self.target = target
        self.batch_records = batch_records
        self.upsert = upsert
        self.schema_columns = schema_columns
        self.dead_letter = dead_letter
        self.wal_access = wal_access  # credentials for records on WAL replicas, not uploaded yet
        self._dead_known: dict[int, int] = {}  # partition -> end offset the dead-letter table holds
        self._columns: DecodedValues | None = None
        self._on_plan = on_plan or (lambda offsets: None)
        self._on_progress = on_progress or (lambda offsets, records: None)
        # Table libraries block; one thread keeps every call of a target on the same thread.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nereus-deliver")
        self._known: dict[int, Position] = {}
        self._stop: asyncio.Event | None = None
        self._planned = False

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    async def _call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    async def deliver_once(self) -> Stats:
        """Deliver up to the tail seen now; re-planned after conflicts and concurrent trims."""
        stats = Stats()
        failures = 0
        while True:
            commits = stats.commits
            try:
                await self._round(stats)
                return stats
            except (TargetConflict, StorageError) as exc:
                # Only failures in a row count: a busy table where we still commit is fine.
                failures = 1 if stats.commits > commits else failures + 1
                if failures >= _MAX_ATTEMPTS:
                    raise
                what = "concurrent commit" if isinstance(exc, TargetConflict) else "read failed (trimmed meanwhile?)"
                log.warning("%s: %s: %s; planning again (%d/%d)", self.target.description, what, exc, failures,
                            _MAX_ATTEMPTS)
                await asyncio.sleep(random.uniform(0, 0.1 * failures))  # let the other writer's round finish

    async def _plan(self) -> list[_Partition]:
        ranges = await _rows.topic_ranges(self.meta, self.topic, must_exist=True)
        if not ranges:
            return []  # a partitioned topic none of whose partitions has a stream yet
        recorded = await self._call(self.target.positions, ranges[0].topic, [r.partition for r in ranges])
        if self.schema_columns:
            self._columns = await plan_columns(self.meta, ranges[0].topic)
            if self.dead_letter is not None and self._columns is not None:
                dead = await self._call(self.dead_letter.positions, ranges[0].topic, [r.partition for r in ranges])
                self._dead_known = {p: pos.end for p, pos in dead.items()}
        if not self._planned:  # after a crash this is where the job resumes
            log.info("%s: delivered so far %s", self.target.description,
                     {p: (pos.start, pos.end) for p, pos in sorted(recorded.items())} or "nothing")
            self._planned = True
        self._known = dict(recorded)
        plan = []
        for r in ranges:
            old = recorded.get(r.partition)
            # A compact topic's records below the raw start that its key view keeps are still the
            # topic's (Kafka consumers read them there): they are read from the view, never deleted.
            served = await _rows.view_serves(self.meta, r)
            if old is None:
                first = 0 if served else r.start
                plan.append(_Partition(r, Position(first, first), False))
                continue
            if r.start > old.end and not served:
                log.warning("%s partition %d: offsets [%d, %d) were trimmed before they were delivered",
                            r.topic, r.partition, old.end, r.start)
            if old.end > r.end:
                log.warning("%s partition %d: the table is ahead of the topic (delivered %d, tail %d); "
                            "was the topic recreated?", r.topic, r.partition, old.end, r.end)
            start = old.start if served else max(old.start, r.start)
            new = Position(start, max(old.end, start))
            plan.append(_Partition(r, new, start > old.start and old.end > old.start))
        return plan

    async def _round(self, stats: Stats) -> None:
        plan = await self._plan()
        if not plan:
            return
        topic = plan[0].range.topic
        self._on_plan(sum(max(0, p.range.end - p.position.end) for p in plan))
        deletes = {p.range.partition: p.position for p in plan if p.delete}
        if deletes:
            _kill_point("before-delete")
            await self._call(self.target.delete_below, topic, deletes)
            self._known.update(deletes)
            stats.deletes += 1
            log.info("%s: deleted rows below the retained start of partitions %s",
                     self.target.description, {p: pos.start for p, pos in deletes.items()})
            _kill_point("after-delete")

        buffer: list[tuple] = []
        pending: dict[int, Position] = {}  # positions the next commit records
        for part in plan:
            p, start = part.range.partition, part.position.start
            todo = replace(part.range, start=part.position.end)  # keeps its aborted transactions
            if todo.start < todo.end:
                async for chunk in self._read(todo, part.range.start):
                    i = 0
                    while i < len(chunk):
                        take = chunk[i:i + self.batch_records - len(buffer)]
                        i += len(take)
                        buffer += take
                        pending[p] = Position(start, take[-1][2] + 1)
                        if len(buffer) >= self.batch_records:
                            await self._commit(topic, buffer, pending, stats)
                            buffer, pending = [], {}
                            if self._stopping():
                                return  # asked to stop: the table says where the next run resumes
            # Offsets without rows (markers, control batches) and trimmed-away starts still
            # move the position, so the next round does not read them again.
            final = Position(start, max(part.position.end, todo.end))
            if self._known.get(p) != final:
                pending[p] = final
        if buffer or pending:
            await self._commit(topic, buffer, pending, stats)

    async def _read(self, todo: _rows.StreamRange, raw_start: int):
        """Lists of rows of ``todo``: with the schema columns when planned, dead letters as ``_Dead``;
        below ``raw_start`` (the stream's start) the rows its key view keeps."""
        if self._columns is None:
            if todo.start < raw_start:
                async for chunk in _rows.read_view_rows(self.meta, self.objects, todo, raw_start):
                    yield chunk
            async for chunk in _rows.read_rows(self.meta, self.objects, _from(todo, raw_start), self.wal_access):
                yield chunk
            return
        decode = self._columns.decode
        async for chunk in self._versioned(todo, raw_start):
            out = []
            for row, version in chunk:
                columns, reason = decode(row[6], version)
                out.append(row + columns if reason is None else _Dead(row + (reason, version)))
            yield out

    async def _versioned(self, todo: _rows.StreamRange, raw_start: int):
        if todo.start < raw_start:
            async for chunk in _rows.read_view_rows(self.meta, self.objects, todo, raw_start, versioned=True):
                yield chunk
        async for chunk in _rows.read_versioned_rows(self.meta, self.objects, _from(todo, raw_start),
                                                     self.wal_access):
            yield chunk

    async def _commit(self, topic: str, buffer: list[tuple], pending: dict[int, Position], stats: Stats) -> None:
        dead = [row for row in buffer if isinstance(row, _Dead)]
        if dead:
            buffer = [row for row in buffer if not isinstance(row, _Dead)]
            await self._commit_dead(topic, dead, pending, stats)
        table = to_arrow(buffer, self._columns.schema if self._columns is not None else ARROW_SCHEMA)
        _kill_point("before-commit")
        if self.upsert:
            table, keyless = latest_per_key(table)
            await self._call(self.target.upsert, topic, table, dict(pending))
            stats.keyless += keyless
        else:
            await self._call(self.target.append, topic, table, dict(pending))
        _kill_point("after-commit")
        offsets = sum(pos.end - max(self._known[p].end if p in self._known else pos.start, pos.start)
                      for p, pos in pending.items())
        self._known.update(pending)
        stats.records += len(buffer) + len(dead)
        stats.offsets += offsets
        stats.commits += 1
        self._on_progress(offsets, len(buffer))
        log.debug("%s: committed %d records, positions %s", self.target.description, len(buffer), pending)

    async def _commit_dead(self, topic: str, dead: list[tuple], pending: dict[int, Position], stats: Stats) -> None:
        """Dead letters go first, recording the same positions: a re-run after a crash before the main
        commit finds them in the dead-letter table and does not add them again."""
        fresh = [row for row in dead if row[2] >= self._dead_known.get(row[1], -1)]
        if fresh and self.dead_letter is not None:
            await self._call(self.dead_letter.append, topic, to_arrow(fresh, DEAD_LETTER_SCHEMA), dict(pending))
            log.warning("%s: %d records are not records of the topic's schema (first: offset %d: %s); "
                        "they went to %s", self.target.description, len(fresh), fresh[0][2], fresh[0][-2],
                        self.dead_letter.description)
        self._dead_known.update({p: pos.end for p, pos in pending.items()})
        stats.dead += len(fresh)

    async def run(self, interval: float, stop: asyncio.Event | None = None) -> Stats:
        """Deliver every ``interval`` seconds until ``stop`` is set.

        A topic that goes missing meanwhile (deleted) is waited for; failed rounds (unreachable
        metadata, lost commit races, concurrent trims) are logged and retried next round: the
        table says where to resume.
        """
        total = Stats()
        stop = self._stop = stop or asyncio.Event()
        while not stop.is_set():
            try:
                stats = await self.deliver_once()
            except TopicNotFound as exc:
                log.info("%s; waiting", exc)
            except (TargetConflict, StorageError, MetadataError) as exc:
                log.warning("%s: round failed (%s); retrying in %ss", self.target.description, exc, interval)
            else:
                total.records += stats.records
                total.offsets += stats.offsets
                total.commits += stats.commits
                total.deletes += stats.deletes
                total.keyless += stats.keyless
                total.dead += stats.dead
            try:
                await wait_for(stop.wait(), interval)
            except asyncio.TimeoutError:
                pass
        return total


__all__ = ["ARROW_SCHEMA", "DEFAULT_BATCH_RECORDS", "Delivery", "Position", "Stats", "Target", "TargetConflict",
           "TargetError", "TopicNotFound", "to_arrow"]
