"""``spark.readStream.format("nereus")``: committed topic records as a micro-batch stream.

    df = (spark.readStream.format("nereus")
          .option("metadata", "oxia://127.0.0.1:6648").option("objects", "file:///...")
          .option("topic", "t").option("maxRecordsPerTrigger", "10000")
          .load())

An offset of the stream is a JSON object: partition -> next offset (``"-1"`` for a
non-partitioned topic), e.g. ``{"0": 120, "1": 98}``. A micro-batch reads
``[start, end)`` of every partition, where ``end`` is each partition's last stable offset
(its committed tail ``tail.next``, or the first offset of its oldest open transaction) when
Spark asked for the latest offset: the stream waits at an open transaction and moves on
once it is decided; records of aborted transactions give no rows. Partitions that appear later (a
partitioned topic given more partitions, or a stream first written after the query
started) are read from their earliest offset.

Options, besides ``metadata``, ``objects``, ``topic``, ``recordsPerPartition`` and
``schemaColumns`` of the batch source:

* ``startingOffset``: ``earliest`` (default), ``latest``, one offset, or JSON per
  partition (partitions not named start at their earliest offset). Only used when the
  query starts without a checkpoint.
* ``startingTimestamp``: instead of startingOffset, ms since the epoch: each partition
  starts at its first record published at or after it (its tail if none is).
* ``maxRecordsPerTrigger``: at most this many offsets per micro-batch, shared among the
  partitions in proportion to their backlog. Spark's availableNow trigger runs this
  source as one micro-batch, so the cap also bounds that batch.

Guarantees: a micro-batch is a pure function of its offsets (committed records never
change), so with a checkpoint Spark replays an unfinished batch with the same records and
an idempotent or transactional sink (files, Delta, ``foreachBatch`` keyed on the batch id,
the ``nereus`` sink with deduplication) sees every record exactly once. Limits: records
trimmed by retention before a batch reads them are skipped; with ``startingOffset=latest``
a failed *first* batch is replayed from the tail seen on restart (Spark asks the source for
its initial offset again and this source keeps no state of its own).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from . import rows as _rows
from .pruning import offset_for_time
from .options import offset_for, option, positive, set_read_options
from .read_tasks import NereusRange, plan_values, read_partition, split_range
from .worker_loop import run_async

Offsets = dict[str, int]


def sorted_offsets(offsets: Mapping[str, int]) -> Offsets:
    """The same offsets in partition order: Spark compares offsets by their JSON text."""
    return {key: int(offsets[key]) for key in sorted(offsets, key=int)}


def cap_offsets(start: Mapping[str, int], latest: Mapping[str, int], limit: int) -> Offsets:
    """``latest`` cut down to at most ``limit`` offsets past ``start``, shared by backlog.

    Every partition gets its proportional share (rounded down); what rounding leaves goes
    one offset at a time to partitions in order, so the cut is deterministic.
    """
    backlog = {k: latest[k] - start.get(k, 0) for k in latest if latest[k] > start.get(k, 0)}
    total = sum(backlog.values())
    if total <= limit:
        return sorted_offsets(latest)
    share = {k: limit * b // total for k, b in backlog.items()}
    left = limit - sum(share.values())
    for k in sorted(backlog, key=int):
        if left == 0:
            break
        if share[k] < backlog[k]:
            share[k] += 1
            left -= 1
    capped = dict(latest)
    for k, b in backlog.items():
        capped[k] = start.get(k, 0) + share[k]
    return sorted_offsets(capped)


async def _bounds(metadata: str, topic: str) -> dict[str, _rows.StreamRange]:
    """Committed bounds of every partition that has a stream, by offset key."""
    from ..meta import connect

    meta = connect(metadata)
    try:
        return await _bounds_in(meta, topic)
    finally:
        await meta.close()


async def _bounds_in(meta, topic: str) -> dict[str, _rows.StreamRange]:
    out = {}
    for name, partition, stream in await _rows.partitions(meta, topic):
        bounds = await _rows.stream_range(meta, name, partition, stream)
        if bounds is not None:
            out[str(partition)] = bounds
    return out


async def _offsets_for_time(metadata: str, objects_url: str, bounds: Mapping[str, _rows.StreamRange],
                            millis: int) -> Offsets:
    from ..meta import connect
    from ..objstore import open_object_store

    meta = connect(metadata)
    objects = open_object_store(objects_url)
    try:
        return {key: await offset_for_time(meta, objects, b, millis) for key, b in bounds.items()}
    finally:
        await objects.close()
        await meta.close()


class NereusStreamReader(DataSourceStreamReader):
    """Offsets, micro-batch planning and reads of ``readStream.format("nereus")``."""

    def __init__(self, options: dict[str, str], schema: StructType) -> None:
        set_read_options(self, options, schema)
        if option(options, "endingOffset") is not None:
            raise ValueError("endingOffset is for batch reads; a stream has no end (see maxRecordsPerTrigger)")
        self.max_records = positive(options, "maxRecordsPerTrigger", None)
        self._initial: Offsets | None = None
        # Where the next micro-batch starts, for the cap: the last end handed out, or what
        # Spark told us on a restart (it plans or commits the checkpoint's last batch first).
        self._position: Offsets | None = None

    def initialOffset(self) -> dict:
        # Spark may ask for the latest offset first and the initial one next: compute it once.
        if self._initial is None:
            bounds = run_async(_bounds(self.metadata, self.topic))
            initial = {}
            for key, b in bounds.items():
                wanted = offset_for(self.starting, b.partition, b.start, b.start, b.end)
                initial[key] = min(max(wanted, b.start), b.end)
            if self.starting_timestamp is not None:
                initial = run_async(_offsets_for_time(self.metadata, self.objects, bounds, self.starting_timestamp))
            self._initial = sorted_offsets(initial)
        return dict(self._initial)

    def latestOffset(self) -> dict:
        start = self._position if self._position is not None else self.initialOffset()
        bounds = run_async(_bounds(self.metadata, self.topic))
        latest = dict(start)  # partitions that lost their stream keep their position
        for key, b in bounds.items():
            latest[key] = max(b.end, start.get(key, 0))  # never behind the start
        if self.max_records is not None:
            first = {k: max(start.get(k, 0), bounds[k].start if k in bounds else 0) for k in latest}
            latest = cap_offsets(first, latest, self.max_records)
        self._position = sorted_offsets(latest)
        return dict(self._position)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if self._position is None:
            self._position = sorted_offsets(end)
        ranges, values = run_async(self._plan(start, end))
        return [NereusRange(self.metadata, self.objects, r, values, self.wal_access) for r in ranges]

    async def _plan(self, start: Mapping[str, int], end: Mapping[str, int]):
        from ..meta import connect

        meta = connect(self.metadata)
        try:
            bounds = await _bounds_in(meta, self.topic)
            ranges = []
            for key in sorted(end, key=int):
                b = bounds.get(key)
                if b is None:
                    continue
                # A partition new in this batch starts at 0, clamped to what retention kept.
                lo = max(int(start.get(key, 0)), b.start)
                ranges.extend(split_range(b, lo, min(int(end[key]), b.end), self.chunk))
            values = await plan_values(meta, self.topic, self.schema) if ranges else None
            return ranges, values
        finally:
            await meta.close()

    def commit(self, end: dict) -> None:
        if self._position is None:
            self._position = sorted_offsets(end)

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return read_partition(partition)


__all__ = ["NereusStreamReader", "cap_offsets", "sorted_offsets"]
