"""The compaction job (``nereus compact``): WAL slices -> per-stream Parquet, on Spark.

The driver plans (which runs of committed ``idx`` groups of which streams become
one object each: ``storage.compaction.plan``), Spark executors carry out one plan
per task (read the slices, build the rows of ``table_format``, write the object
through the object store layer, switch the index with one CAS:
``storage.compaction.compact``), and the driver then syncs the built-in Iceberg
tables of the topics it touched (``sbt.sync``). Executors reach the cluster like
any client: the metadata over the Oxia protocol, the objects by URL.

Transactions: only ranges below a stream's last stable offset are planned (an open
transaction may still abort), and records of aborted transactions get no row (their
offsets are a gap, as markers are); the stream's entries are kept whole, so brokers
serve the compacted range exactly as before.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

from ..ledger.naming import InvalidTopicName, TopicName
from ..meta import MetadataStore
from ..storage import compacted_format, compaction, view
from ..storage.compaction_lease import lease as compaction_lease
from ..storage.errors import CompactionConflict
from ..transactions.stream_index import aborted_view, read_view
from . import table_format
from .wal_access import WalAccess

log = logging.getLogger(__name__)

JOB_GROUP = "nereus-compact"
#: Session timeout of the driver's metadata client: how long a dead job's leases outlive it.
LEASE_SESSION_SECONDS = 5.0


@dataclass(frozen=True)
class CompactionTask:
    """One plan for one executor task."""

    topic: str  # the base topic (partitioned topics: not the partition's name)
    partition: int
    plan: compaction.CompactionPlan
    owner: str | None = None  # the job whose lease covers the stream
    aborted: tuple[tuple[int, int, int], ...] = ()  # (pid, first, last) of aborted transactions in range
    values: object = None  # schema_columns.ValueColumns of an AVRO/JSON topic: its fields become columns

    @property
    def input_bytes(self) -> int:
        return self.plan.input_bytes


#: Longest pause of a schedule (the broker's check for work, a worker's runs) while no stream has work.
IDLE_PAUSE_SECONDS = 15.0
#: WAL input up to this many bytes is compacted in the job's own process rather than as a Spark job.
LOCAL_BYTES = 8 << 20
#: Tasks of such work running at once (each its own ranges: they never touch the same groups).
LOCAL_CONCURRENCY = 4


@dataclass
class JobReport:
    tasks: int = 0
    compacted: int = 0
    conflicts: int = 0
    input_bytes: int = 0
    output_bytes: int = 0
    seconds: float = 0.0
    tables: list = field(default_factory=list)


def encoder(partition: int, aborted: tuple[tuple[int, int, int], ...] = (), values=None) -> compaction.Encoder:
    """Builds the compacted object of a range of a topic partition's stream (rows + entries);
    records of the ``aborted`` transactions ``(pid, first, last)`` get no row; ``values``
    (``schema_columns.ValueColumns``) adds the topic's schema fields as columns."""
    txns = aborted_view(aborted) if aborted else None
    columns = None
    if values is not None:
        from .schema_columns import arrow_columns

        columns = arrow_columns(values)

    def encode(stream_id: int, first: int, entries, generation: int) -> bytes:
        table = table_format.build_table(partition, first, entries, txns, columns)
        header = compacted_format.CompactedHeader(stream_id, first, sum(c for c, _ in entries), len(entries),
                                                  generation)
        return compacted_format.encode(table, header)

    return encode


def merger() -> compaction.Merger:
    """Merges adjacent compacted objects of a stream by their tables (``table_format.merge_tables``):
    Parquet in, Parquet out, no entry decoded or row built again."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def merge(stream_id: int, first: int, objects: list[bytes], generation: int) -> bytes | None:
        table = table_format.merge_tables([pq.read_table(pa.BufferReader(data)) for data in objects])
        if table is None:
            return None
        headers = [compacted_format.read_header(data) for data in objects]
        header = compacted_format.CompactedHeader(stream_id, first, sum(h.records for h in headers),
                                                  sum(h.entries for h in headers), generation)
        return compacted_format.encode(table, header)

    return merge


async def topic_streams(meta: MetadataStore, topics: list[str] | None) -> list[tuple[str, int, str]]:
    """(base topic, partition, stream name) of the given topics, or of every topic's stream."""
    from . import rows as _rows

    if topics:
        out = []
        for topic in topics:
            out += [(str(TopicName.parse(topic)), partition, stream)
                    for _, partition, stream in await _rows.partitions(meta, topic)]
        return out
    out = []
    async for stream in view.stream_names(meta):
        try:
            name = TopicName.parse(stream)
        except InvalidTopicName:
            continue
        out.append((str(name.base), name.partition_index, stream))
    return out


async def _stream_ids(meta: MetadataStore, topics: list[str] | None) -> list[tuple[str, int, int]]:
    """(base topic, partition, stream id) of the existing streams of ``topics`` (None: all)."""
    out = []
    for topic, partition, stream in await topic_streams(meta, topics):
        sid = await view.stream_id(meta, stream)
        if sid is not None:
            out.append((topic, partition, sid))
    return out


async def stable_plans(meta: MetadataStore, stream_id: int, **options) -> list[tuple[compaction.CompactionPlan,
                                                                                     tuple]]:
    """``compaction.plan`` below the stream's last stable offset, each plan with its aborted ranges."""
    if not await compaction.plan(meta, stream_id, **options):
        return []  # the common case of a schedule's check: no transaction index read
    _, end = await view.bounds(meta, stream_id)  # the tail first: then the LSO is at most it
    txns = await read_view(meta, stream_id, end)
    plans = await compaction.plan(meta, stream_id, stable_offset=txns.lso, **options)
    return [(job, tuple(txns.aborted(job.first, job.last + 1))) for job in plans]


async def has_work(meta: MetadataStore, *, min_bytes: int = 1, max_age_seconds: float | None = None) -> bool:
    """Whether some stream has a range a job with these settings would compact now.

    The broker's schedule asks this before it starts a Spark worker; it stops at the
    first stream with work.
    """
    for _, _, stream_id in await _stream_ids(meta, None):
        if await stable_plans(meta, stream_id, min_bytes=min_bytes, max_age_seconds=max_age_seconds):
            return True
    return False


async def run_task_async(metadata_url: str, objects_url: str, task: CompactionTask) -> dict:
    from ..meta import connect
    from ..objstore import open_object_store

    meta = connect(metadata_url)
    objects = open_object_store(objects_url)
    try:
        return await _compact_task(meta, objects, task)
    finally:
        await objects.close()
        await meta.close()


async def _compact_task(meta: MetadataStore, objects, task: CompactionTask, *, finish_now: bool = True) -> dict:
    """One task's result: its topic, bytes and object, or the conflict that skipped it; with
    ``finish_now=False`` also ``finishing`` (``compaction.CompactionResult.finishing``)."""
    try:
        # Slices acknowledged on WAL replicas are read there, or waited for until uploaded.
        async with WalAccess().reader(meta, objects) as reader:
            result = await compaction.compact(meta, objects, reader, task.plan,
                                              encoder(task.partition, task.aborted, task.values),
                                              lease_owner=task.owner, merge=merger(), finish_now=finish_now)
    except CompactionConflict as exc:
        log.info("skipped: %s", exc)
        return {"topic": task.topic, "conflict": str(exc)}
    out = {"topic": task.topic, "input_bytes": result.input_bytes, "output_bytes": result.output_bytes,
           "object": result.object}
    if result.finishing is not None:
        out["finishing"] = result.finishing
    return out


def run_task(metadata_url: str, objects_url: str, task: CompactionTask) -> dict:
    """One executor task, on the worker process's one event loop."""
    from .worker_loop import run_async

    return run_async(run_task_async(metadata_url, objects_url, task))


_driver_loop: asyncio.AbstractEventLoop | None = None
_driver_loop_lock = threading.Lock()


def driver_loop() -> asyncio.AbstractEventLoop:
    """The driver process's one metadata event loop, on a daemon thread, kept across runs.

    grpc.aio binds its poller to the first loop it sees: a loop per run, closed after
    it, made the poller call into a closed loop for late events of the run's channels
    (``nereus compact --interval`` runs many jobs in one process).
    """
    global _driver_loop
    with _driver_loop_lock:
        if _driver_loop is None:
            _driver_loop = asyncio.new_event_loop()
            threading.Thread(target=_driver_loop.run_forever, name="nereus-compact-meta", daemon=True).start()
        return _driver_loop


class _MetadataThread:
    """The driver's metadata client, on ``driver_loop()``.

    The client must keep its session alive (heartbeats) while the driver blocks
    in Spark: the streams' compaction leases are ephemeral records of that session,
    so they go away by themselves if the job dies.
    """

    def __init__(self, metadata_url: str) -> None:
        self.loop = driver_loop()
        self.meta = self.call(self._connect(metadata_url))

    @staticmethod
    async def _connect(metadata_url: str) -> MetadataStore:
        from ..meta import connect

        return connect(metadata_url, session_timeout=LEASE_SESSION_SECONDS)

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.call(self.meta.close())

    @classmethod
    def shared(cls, metadata_url: str) -> "_MetadataThread":
        """The client of every run of this process (a worker running every few seconds would
        otherwise open a client and a session per run); leases are released after each run."""
        client = _SHARED.get(metadata_url)
        if client is None:
            if not _SHARED:
                atexit.register(_close_shared)
            client = _SHARED[metadata_url] = cls(metadata_url)
        return client

    @staticmethod
    def discard(metadata_url: str) -> None:
        client = _SHARED.pop(metadata_url, None)
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


_SHARED: dict[str, _MetadataThread] = {}


def _close_shared() -> None:
    for url in list(_SHARED):
        _MetadataThread.discard(url)


async def _lease_and_plan(meta: MetadataStore, topics, owner: str, target_bytes: int, min_bytes: int,
                          max_age_seconds: float | None) -> tuple[list[CompactionTask], list]:
    """Plans of the streams whose lease we got (held until the caller releases them).

    A stream is leased only once a read-only plan found work (a frequent schedule over quiet
    streams writes nothing), then planned again under the lease. Runs of small compacted
    objects (below a quarter of ``target_bytes``) are planned as merges.
    """
    from .schema_columns import latest_value_columns  # pyspark: only where a job plans

    tasks, leases = [], []
    values: dict[str, object] = {}
    options = {"target_bytes": target_bytes, "min_bytes": min_bytes, "max_age_seconds": max_age_seconds,
               "merge_below": target_bytes // 4}
    for topic, partition, stream_id in await _stream_ids(meta, topics):
        if not await compaction.plan(meta, stream_id, **options):
            continue
        lease = compaction_lease(meta, stream_id, owner)
        try:
            await lease.__aenter__()
        except CompactionConflict as exc:
            log.info("skipped: %s", exc)
            continue
        plans = await stable_plans(meta, stream_id, **options)
        if plans:
            leases.append(lease)
            if topic not in values:
                values[topic] = await latest_value_columns(meta, topic)
            tasks += [CompactionTask(topic, partition, job, owner, aborted, values[topic]) for job, aborted in plans]
        else:
            await lease.__aexit__(None, None, None)
    return tasks, leases


async def _finish_and_release(finishing: list, leases: list) -> None:
    """Step 5 of each compaction run here (a failure is left to the collector, which finishes
    it from its marker), then the streams' leases."""
    limit = asyncio.Semaphore(LOCAL_CONCURRENCY)

    async def finish(step) -> None:
        async with limit:
            try:
                await step()
            except Exception as exc:  # noqa: BLE001 - the change is visible; only bookkeeping waits
                log.warning("finishing a compaction failed (the collector finishes it): %s", exc)

    await asyncio.gather(*(finish(step) for step in finishing))
    for lease in leases:
        await lease.__aexit__(None, None, None)


def run_job(spark, metadata_url: str, objects_url: str, *, topics: list[str] | None = None,
            target_bytes: int = compaction.TARGET_BYTES, min_bytes: int = 1, max_age_seconds: float | None = None,
            catalog=None, progress: bool = False, repair_all: bool = True,
            local_bytes: int = LOCAL_BYTES) -> JobReport:
    """Lease and plan, compact (in Spark tasks; small work in this process), then sync the touched topics'
    SBT tables (if ``catalog``); ``repair_all``: every table there is or should be (catalog repair).
    WAL input of at most ``local_bytes`` (and every merge) is compacted in this process."""
    started = time.monotonic()
    io = _MetadataThread.shared(metadata_url)
    try:
        owner = f"compact-{uuid.uuid4().hex[:8]}"
        tasks, leases = io.call(_lease_and_plan(io.meta, topics, owner, target_bytes, min_bytes, max_age_seconds))
        report = JobReport(tasks=len(tasks))
        finishing: list = []
        try:
            # Merges are Parquet in, Parquet out (no row built): they always run here. So does a
            # small tail (a frequent schedule's usual run): no Spark job to schedule.
            fresh = [t for t in tasks if not t.plan.merges]
            if sum(t.input_bytes for t in fresh) <= local_bytes:
                results = io.call(_run_here(io.meta, objects_url, tasks))
            else:
                results = (_run_on_spark(spark, metadata_url, objects_url, fresh, progress)
                           + io.call(_run_here(io.meta, objects_url, [t for t in tasks if t.plan.merges])))
            finishing = [r.pop("finishing") for r in results if "finishing" in r]
            for r in results:
                if "conflict" in r:
                    report.conflicts += 1
                else:
                    report.compacted += 1
                    report.input_bytes += r["input_bytes"]
                    report.output_bytes += r["output_bytes"]
            if catalog is not None:
                from .repair import repair

                # Without a topic list, every table there is or should be: retention may have
                # removed data files, and a table may have fallen behind (catalog repair).
                touched = sorted({t.topic for t in tasks} | set(topics or ()))
                repaired = io.call(repair(io.meta, catalog, objects_url,
                                          topics=None if repair_all and not topics else touched, also=touched))
                report.tables = repaired.repaired
        finally:
            # The replaced slices are released after the table commit: readers and the table
            # see the compacted objects first, the bookkeeping does not delay them.
            io.call(_finish_and_release(finishing, leases))
    except BaseException:
        _MetadataThread.discard(metadata_url)  # the next run starts from a new client (and session)
        raise
    report.seconds = time.monotonic() - started
    return report


async def _run_here(meta: MetadataStore, objects_url: str, tasks: list[CompactionTask]) -> list[dict]:
    from ..objstore import open_object_store

    objects = open_object_store(objects_url)
    limit = asyncio.Semaphore(LOCAL_CONCURRENCY)  # mostly metadata round trips: overlap them

    async def one(task: CompactionTask) -> dict:
        async with limit:
            return await _compact_task(meta, objects, task, finish_now=False)

    try:
        return list(await asyncio.gather(*(one(task) for task in tasks)))
    finally:
        await objects.close()


def _run_on_spark(spark, metadata_url: str, objects_url: str, tasks: list[CompactionTask],
                  progress: bool) -> list[dict]:
    sc = spark.sparkContext
    group = f"{JOB_GROUP}-{uuid.uuid4().hex[:8]}"
    outcome: dict = {}

    def collect() -> None:
        sc.setJobGroup(group, f"nereus compaction of {len(tasks)} range(s)")
        try:
            outcome["results"] = (sc.parallelize(tasks, len(tasks))
                                  .map(lambda t: run_task(metadata_url, objects_url, t)).collect())
        except BaseException as exc:  # re-raised on the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=collect, name="nereus-compact", daemon=True)
    worker.start()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), unit="range", desc="compacting")
    try:
        while worker.is_alive():
            worker.join(0.2)
            if bar is not None:
                bar.update(_completed_tasks(sc, group) - bar.n)
        if bar is not None:
            bar.update(len(tasks) - bar.n)
    finally:
        if bar is not None:
            bar.close()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["results"]


def _completed_tasks(sc, group: str) -> int:
    tracker = sc.statusTracker()
    done = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else ():
            stage = tracker.getStageInfo(stage_id)
            done += stage.numCompletedTasks if stage else 0
    return done
