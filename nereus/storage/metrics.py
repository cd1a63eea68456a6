"""Prometheus metrics of the storage layer (registered in the default registry).

The storage layer owns its series; the broker only serves the registry. What
happens in other processes (the compaction job runs in Spark workers) reaches a
broker's ``/metrics`` through the metadata plane: compaction adds its results to
one progress record (``record_compaction``) that ``ProgressCollector`` reads off the
scrape path.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from .. import scraped
from ..meta import MetadataStore
from ..meta.cas import update
from ..scraped import RefreshedCollector
from . import records

log = logging.getLogger(__name__)

APPENDED_ENTRIES = Counter("nereus_storage_appended_entries", "Entries committed to streams")
APPENDED_RECORDS = Counter("nereus_storage_appended_records", "Records committed to streams")
APPENDED_BYTES = Counter("nereus_storage_appended_bytes", "Entry bytes committed to streams")
WAL_OBJECTS = Counter("nereus_storage_wal_objects", "WAL objects written")
WAL_OBJECT_BYTES = Counter("nereus_storage_wal_object_bytes", "Bytes of WAL objects written")
WAL_FLUSH_BYTES = Histogram(
    "nereus_storage_wal_flush_bytes", "Size of each flush's WAL object",
    buckets=tuple(1 << shift for shift in range(10, 27, 2)),  # 1 KiB .. 64 MiB
)
FENCED_SLICES = Counter("nereus_storage_fenced_slices", "Slices rejected because their session was fenced")
RACED_PUTS = Counter(
    "nereus_storage_raced_puts",
    "Slow WAL object puts raced by a second put of the same bytes, by the one that landed first",
    ["winner"],
)
for _winner in ("first", "second"):
    RACED_PUTS.labels(_winner)
FLUSH_SECONDS = Histogram(
    "nereus_storage_flush_seconds", "Time from flush start to the last slice committed",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
COMMIT_SECONDS = Histogram(
    "nereus_storage_commit_seconds", "Time of one flush's metadata commit (every stream's slice in one put_many)",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1),
)
OBJECT_PUTS = Counter("nereus_storage_object_puts", "Objects written, by kind", ["kind"])
OBJECT_PUT_BYTES = Counter("nereus_storage_object_put_bytes", "Bytes of objects written, by kind", ["kind"])
OBJECT_PUT_ERRORS = Counter("nereus_storage_object_put_errors", "Object writes that failed, by kind", ["kind"])
FETCHED_BYTES = Counter("nereus_storage_fetched_bytes", "Entry bytes served to readers", ["source"])
CACHE_HITS = Counter("nereus_storage_cache_hits", "Reads answered by a cache", ["cache"])
CACHE_MISSES = Counter("nereus_storage_cache_misses", "Reads a cache could not answer", ["cache"])
WAL_HELD_BYTES = Gauge("nereus_storage_wal_upload_lag_bytes",
                       "Bytes acknowledged on WAL replicas and not yet in the object store")
WAL_APPENDS_WAITING = Gauge("nereus_storage_wal_appends_waiting",
                            "Appends waiting because too much is acknowledged on WAL replicas and not uploaded")
FLUSH_STAGE_SECONDS = Histogram(
    "nereus_storage_flush_stage_seconds",
    "Where a flush's time goes: queued (its first append waiting for the flush to start), write (the object "
    "put or the WAL replicas' quorum), ordered (waiting for the previous flush's commit), commit",
    ["stage"], buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1),
)
FLUSH_STAGES = ("queued", "write", "ordered", "commit")
for _stage in FLUSH_STAGES:
    FLUSH_STAGE_SECONDS.labels(_stage)
WAL_UPLOAD_SECONDS = Histogram(
    "nereus_storage_wal_upload_lag_seconds", "Time from an object's acknowledgement on WAL replicas to its upload",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
)
WAL_REPLICA_READS = Counter("nereus_storage_wal_replica_reads", "Slices read from WAL replicas before their upload")
GC_DELETED_OBJECTS = Counter("nereus_storage_gc_deleted_objects", "Objects deleted by the garbage collector")
GC_RECLAIMED_BYTES = Counter("nereus_storage_gc_reclaimed_bytes", "Bytes of the objects the collector deleted")

#: Kinds of objects storage writes; their series exist from the start (rate() needs a zero to start from).
OBJECT_KINDS = ("wal", "wal_upload", "compacted", "tombstone", "cursor_snapshot")
for _kind in OBJECT_KINDS:
    for _counter in (OBJECT_PUTS, OBJECT_PUT_BYTES, OBJECT_PUT_ERRORS):
        _counter.labels(_kind)
for _cache in ("tail", "block"):
    CACHE_HITS.labels(_cache)
    CACHE_MISSES.labels(_cache)

#: Where compaction results add up (one record for the cluster).
PROGRESS_KEY = "/nereus/compaction/progress"
PROGRESS_REFRESH_SECONDS = 5.0


async def put_object(objects, key: str, data, kind: str) -> None:
    """``objects.put_if_absent(key, data)``, counted under ``kind`` (wal, compacted, ...)."""
    size = sum(memoryview(c).nbytes for c in data) if isinstance(data, list) else memoryview(data).nbytes
    try:
        await objects.put_if_absent(key, data)
    except BaseException:
        OBJECT_PUT_ERRORS.labels(kind).inc()
        raise
    OBJECT_PUTS.labels(kind).inc()
    OBJECT_PUT_BYTES.labels(kind).inc(size)


async def record_compaction(meta: MetadataStore, input_bytes: int, output_bytes: int) -> None:
    """Add one compacted range to the cluster's compaction progress."""
    now = time.time()

    def add(old: bytes | None) -> bytes:
        value = records.decode(old) if old else {}
        return records.encode({
            "ranges": value.get("ranges", 0) + 1,
            "input_bytes": value.get("input_bytes", 0) + input_bytes,
            "output_bytes": value.get("output_bytes", 0) + output_bytes,
            "last_run": max(now, value.get("last_run", 0.0)),
        })

    await update(meta, PROGRESS_KEY, add)


class ProgressCollector(RefreshedCollector[dict]):
    """The compaction progress record as series: the last value read, re-read in the background."""

    what = "compaction progress"

    def __init__(self, meta: MetadataStore, *, refresh_seconds: float = PROGRESS_REFRESH_SECONDS) -> None:
        super().__init__({}, refresh_seconds=refresh_seconds)
        self.meta = meta

    def families(self, value: dict):
        families = []
        for name, doc, field in (
                ("nereus_storage_compaction_ranges", "Ranges compacted (cluster-wide)", "ranges"),
                ("nereus_storage_compaction_input_bytes", "Bytes of the slices compaction replaced (cluster-wide)",
                 "input_bytes"),
                ("nereus_storage_compaction_output_bytes", "Bytes of the compacted objects written (cluster-wide)",
                 "output_bytes")):
            family = CounterMetricFamily(name, doc)
            family.add_metric([], value.get(field, 0))
            families.append(family)
        last = GaugeMetricFamily("nereus_storage_compaction_last_run_timestamp_seconds",
                                 "When the last range was compacted (0: never)")
        last.add_metric([], value.get("last_run", 0.0))
        return families + [last]

    async def read(self) -> dict:
        rec = await self.meta.get(PROGRESS_KEY)
        return records.decode(rec.value) if rec is not None else {}


def register_progress(meta: MetadataStore) -> ProgressCollector | None:
    """Serve the compaction progress in ``/metrics``; None when this process already does."""
    return scraped.register(ProgressCollector(meta))


unregister_progress = scraped.unregister
