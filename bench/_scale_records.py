"""Part ``records`` of ``bench/scale.py``: millions of topic records in one embedded metadata engine.

A broker runs in this process (Pulsar, Kafka and HTTP listeners on free ports) beside a
fresh durable embedded engine of ``--shards`` shards (LMDB, every group commit fsync'd),
as a standalone with ``--metadata-shards`` runs it. Topics are created through the
functions the admin REST handlers call (``broker/admin``: tenants, namespaces,
``PUT .../{topic}`` and ``PUT .../{topic}/partitions``), not as raw keys:

* ``--tenants`` tenants x ``--namespaces`` namespaces each;
* the topics go to the namespaces in turn, each namespace getting its share of
  partitioned ones: every ``--partitioned-every``-th topic is partitioned with
  ``--partitions`` partitions, the others are not.
* ``--topics`` counts topic records as Pulsar lists topics: a non-partitioned topic is
  one, a partitioned topic is one per partition (each partition is a stream of its own;
  its partitioned-topic record comes on top). Creation stops at the first name that
  reaches the count.

Then, at the full count: lookups of random topics over a Pulsar binary connection to the
broker (PARTITIONED_METADATA of the topic, then LOOKUP of it or of one of its partitions:
what a client does before it produces; the first LOOKUP of a topic claims it for the
broker, a write; a second LOOKUP finds it owned; between those, a LOOKUP of the transaction
coordinators' topic, answered without metadata, measures what the machine adds), one namespace listed page by page
(``StreamStorage.list_streams_page``) and whole (what ``GET /admin/v2/persistent/{t}/{ns}``
returns), and a restart: broker and engine closed, the engine opened again, the broker
started, the first lookup answered. RSS is sampled throughout: ``rss`` counts LMDB's
mapped file pages (page cache the kernel may drop), ``anon`` the heap alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

from nereus.broker.admin import namespaces, tenants, topics
from nereus.broker.admin.common import AdminContext
from nereus.broker.node import BrokerOptions, start_broker
from nereus.codec.pulsar import pb
from nereus.ledger.naming import TopicName
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.pulsar.client.connection import ClientConnection
from nereus.pulsar.server.transactions import TC_ASSIGN_TOPIC

_Lookup = pb.CommandLookupTopicResponse
_Meta = pb.CommandPartitionedTopicMetadataResponse
RSS_TARGET = 4 << 30
LOOKUP_P99_TARGET_MS = 5.0


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--topics", type=int, default=10_000_000,
                       help="topic records to create (a partition counts as one; default 10,000,000)")
    group.add_argument("--tenants", type=int, default=100)
    group.add_argument("--namespaces", type=int, default=10, help="namespaces per tenant")
    group.add_argument("--partitioned-every", type=int, default=10,
                       help="every n-th topic is partitioned (0: none)")
    group.add_argument("--partitions", type=int, default=4, help="partitions of a partitioned topic")
    group.add_argument("--shards", type=int, default=4, help="metadata shards (the standalone's --metadata-shards)")
    group.add_argument("--concurrency", type=int, default=500, help="topic creations in flight")
    group.add_argument("--lookups", type=int, default=10_000, help="random topics looked up at the full count")
    group.add_argument("--page-size", type=int, default=1000, help="names per page of the namespace listing")
    group.add_argument("--progress-seconds", type=float, default=15.0)
    group.add_argument("--seed", type=int, default=20261129, help="of the random topics looked up")
    group.add_argument("--keep", action="store_true", help="keep the data directory (its path is printed)")
    group.add_argument("--existing", default=None, metavar="DIR",
                       help="measure lookups, listing and restart on the data directory of an earlier run "
                            "(kept with --keep; give the same layout options), creating nothing")


class Layout:
    """Which topic name ``i`` is: tenant, namespace, partitioned or not. Nothing is kept per topic."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.tenants, self.namespaces = args.tenants, args.namespaces
        self.every, self.partitions = args.partitioned_every, args.partitions
        self.names = self._names_for(args.topics)
        self.records = self.records_of(self.names)

    def topic(self, i: int) -> tuple[TopicName, int]:
        """Topic ``i`` and its partition count (0: not partitioned)."""
        partitioned = self.every > 0 and i % self.every == 0
        # Namespaces in turn, shifted by i % every so that each gets its share of partitioned topics.
        every = max(self.every, 1)
        slot = (i // every + i % every) % (self.tenants * self.namespaces)
        tenant, namespace = slot % self.tenants, slot // self.tenants
        local = f"p-{i}" if partitioned else f"t-{i}"
        return TopicName.parse(f"persistent://tenant-{tenant}/ns-{namespace}/{local}"), \
            (self.partitions if partitioned else 0)

    def records_of(self, names: int) -> int:
        """Topic records (a partition counts as one) of the first ``names`` topics."""
        partitioned = (names + self.every - 1) // self.every if self.every > 0 else 0
        return names + partitioned * (self.partitions - 1)

    def _names_for(self, records: int) -> int:
        lo, hi = 0, records
        while lo < hi:  # the fewest names that reach ``records``
            mid = (lo + hi) // 2
            if self.records_of(mid) >= records:
                hi = mid
            else:
                lo = mid + 1
        return lo


class Memory:
    """Samples /proc/self/status: VmRSS (with LMDB's mapped pages) and RssAnon (the heap), with peaks."""

    def __init__(self, interval: float = 0.5) -> None:
        self.peak_rss = self.peak_anon = 0
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, name="memory-sampler", daemon=True)
        self._thread.start()

    @staticmethod
    def now() -> tuple[int, int]:
        """(rss, anon) in bytes."""
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields["VmRSS"], fields["RssAnon"]

    def sample(self) -> tuple[int, int]:
        rss, anon = self.now()
        self.peak_rss, self.peak_anon = max(self.peak_rss, rss), max(self.peak_anon, anon)
        return rss, anon

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def disk_usage(path: str) -> tuple[int, int]:
    """(allocated, apparent) bytes of the files under ``path``."""
    allocated = apparent = 0
    for root, _, files in os.walk(path):
        for name in files:
            st = os.stat(os.path.join(root, name))
            allocated += st.st_blocks * 512
            apparent += st.st_size
    return allocated, apparent


def percentiles(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    if not s:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    return {"p50_ms": round(s[len(s) // 2] * 1000, 2), "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1000, 2),
            "max_ms": round(s[-1] * 1000, 2)}


def mb(n: int) -> int:
    return round(n / 2**20)


class Broker:
    """A broker in this process over the engine at ``meta_dir``; ``ctx`` is what its admin handlers get."""

    def __init__(self, root: Path, shards: int) -> None:
        self.root, self.shards = root, shards

    async def start(self) -> "Broker":
        self.stack = contextlib.AsyncExitStack()
        self.engine = open_engine(str(self.root / "meta"), shards=self.shards)
        self.stack.push_async_callback(self.engine.close)
        self.meta = self.engine.client(identity=f"scale-{os.getpid()}", session_timeout=10.0)
        self.stack.push_async_callback(self.meta.close)
        self.engine_ready = time.perf_counter()
        # Every shard has opened its LMDB environment once a listing has reached each of them.
        await self.meta.list_page("", "\U0010ffff", limit=1)
        self.engine_opened = time.perf_counter()
        objects_url = (self.root / "objects").resolve().as_uri()
        objects = open_object_store(objects_url)
        self.stack.push_async_callback(objects.close)
        options = BrokerOptions(http_port=0, pulsar_port=0, kafka_port=0, compaction_interval=0,
                                log_dir=self.root / "logs")
        self.node = await start_broker(self.stack, self.meta, objects, objects_url=objects_url,
                                       metadata_url="embedded", options=options)
        self.ctx = AdminContext(storage=self.node.storage, meta=self.meta, pulsar=self.node.pulsar, node=self.node)
        return self

    async def connect(self) -> ClientConnection:
        conn = await ClientConnection.open(self.node.pulsar.service_url)
        self.stack.callback(conn.close)
        return conn

    async def close(self) -> None:
        await self.stack.aclose()


async def create_topics(broker: Broker, layout: Layout, args: argparse.Namespace, memory: Memory) -> dict:
    ctx = broker.ctx
    for t in range(layout.tenants):
        await tenants.create(ctx, f"tenant-{t}", None)
        for n in range(layout.namespaces):
            await namespaces.create(ctx, f"tenant-{t}", f"ns-{n}", None)
    clock = time.perf_counter
    next_i = created = 0
    latencies: list[float] = []  # every 64th creation's: enough for percentiles, bounded
    millions: list[float] = []  # time at which each further million records was reached
    start = clock()

    async def worker() -> None:
        nonlocal next_i, created
        while next_i < layout.names:
            i = next_i
            next_i += 1
            name, partitions = layout.topic(i)
            t0 = clock()
            if partitions:
                await topics.create_partitioned_with_partitions(ctx, name, partitions)
            else:
                await topics.create_non_partitioned(ctx, name)
            if i % 64 == 0:
                latencies.append(clock() - t0)
            created += partitions or 1
            while created >= (len(millions) + 1) * 1_000_000:
                millions.append(clock())

    async def progress() -> None:
        last_t, last_n = start, 0
        while True:
            await asyncio.sleep(args.progress_seconds)
            now, n = clock(), created
            rss, anon = memory.sample()
            rate = (n - last_n) / (now - last_t)
            eta = (layout.records - n) / rate if rate > 0 else float("inf")
            print(f"  records {n:,}/{layout.records:,} ({100 * n / layout.records:.1f}%) {rate:,.0f}/s now, "
                  f"{n / (now - start):,.0f}/s overall, rss {mb(rss)} MB, anon {mb(anon)} MB, "
                  f"load {os.getloadavg()[0]:.1f}, eta {eta / 60:.1f} min", flush=True)
            last_t, last_n = now, n

    reporter = asyncio.ensure_future(progress())
    cpu0 = time.process_time()
    try:
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    finally:
        reporter.cancel()
    seconds = clock() - start
    cpu = time.process_time() - cpu0
    edges = [start] + millions
    per_million = [round(1_000_000 / (b - a)) for a, b in zip(edges, edges[1:])]
    return {"records": created, "topic_names": layout.names,
            "partitioned_topics": (layout.names + layout.every - 1) // layout.every if layout.every else 0,
            "create_seconds": round(seconds, 1), "creates_per_s": round(created / seconds),
            "creates_per_s_by_million": "/".join(map(str, per_million)) or "-",
            "create_cpu_s": round(cpu, 1), **{f"create_{k}": v for k, v in percentiles(latencies).items()}}


async def request(conn: ClientConnection, build) -> tuple[float, object]:
    t0 = time.perf_counter()
    frame = await conn.request(build)
    return time.perf_counter() - t0, frame.body


async def lookup(conn: ClientConnection, name: TopicName, partitions: int, rng: random.Random) -> tuple[float, float]:
    """PARTITIONED_METADATA of ``name``, then LOOKUP of it or of one of its partitions: (seconds, seconds)."""
    took_meta, answer = await request(conn, lambda rid: pb.CommandPartitionedTopicMetadata(
        topic=str(name), request_id=rid))
    assert answer.response == _Meta.Success and answer.partitions == partitions, (name, answer)
    target = name.partition(rng.randrange(partitions)) if partitions else name
    took_lookup, answer = await request(conn, lambda rid: pb.CommandLookupTopic(topic=str(target), request_id=rid))
    assert answer.response == _Lookup.Connect, (target, answer)
    return took_meta, took_lookup


async def measure_lookups(broker: Broker, layout: Layout, count: int, rng: random.Random) -> dict:
    conn = await broker.connect()
    picked = [rng.randrange(layout.names) for _ in range(count)]
    metas, firsts, seconds_ = [], [], []
    for i in picked:
        name, partitions = layout.topic(i)
        took_meta, took_lookup = await lookup(conn, name, partitions, rng)
        metas.append(took_meta)
        firsts.append(took_lookup)
    # The control: the transaction coordinators' topic is answered from memory, by the same connection
    # and handlers, without a metadata read: what this machine adds to any lookup at the moment.
    coordinators = str(TopicName.parse(TC_ASSIGN_TOPIC).partition(0))
    controls = []
    for i in picked:  # owned by the broker now: a lookup that reads only
        name, partitions = layout.topic(i)
        seconds_.append((await lookup(conn, name, partitions, rng))[1])
        took, answer = await request(conn, lambda rid: pb.CommandLookupTopic(topic=coordinators, request_id=rid))
        assert answer.response == _Lookup.Connect, answer
        controls.append(took)
    out = {}
    for what, samples in (("partitioned_metadata", metas), ("lookup_first", firsts), ("lookup_owned", seconds_),
                          ("lookup_no_metadata", controls)):
        out.update({f"{what}_{k}": v for k, v in percentiles(samples).items()})
    return out


async def measure_listing(broker: Broker, page_size: int, namespaces_: list[tuple[str, str]]) -> dict:
    storage, clock = broker.ctx.storage, time.perf_counter
    pages, walks, wholes, listed = [], [], [], 0
    for tenant, namespace in namespaces_:
        prefix = f"persistent://{tenant}/{namespace}/"
        after, t0, names = None, clock(), 0
        while True:
            tp = clock()
            page = await storage.list_streams_page(prefix, start_after=after, limit=page_size)
            pages.append(clock() - tp)
            names += len(page)
            if len(page) < page_size:
                break
            after = page[-1]
        walks.append(clock() - t0)
        t0 = clock()
        whole = await topics.namespace_topics(broker.ctx, tenant, namespace)
        wholes.append(clock() - t0)
        assert len(whole) == names, (tenant, namespace, len(whole), names)
        listed = names
    return {"namespace_topics": listed, "list_page_size": page_size,
            **{f"list_page_{k}": v for k, v in percentiles(pages).items()},
            "list_paged_namespace_ms": round(max(walks) * 1000, 1),
            "list_whole_namespace_ms": round(max(wholes) * 1000, 1)}


async def run(args: argparse.Namespace) -> dict:
    layout = Layout(args)
    root = Path(args.existing) if args.existing else Path(tempfile.mkdtemp(prefix="scale-records-", dir=args.dir))
    print(f"records: {layout.records:,} topic records = {layout.names:,} topics "
          f"(every {layout.every}th partitioned x {layout.partitions}) in {layout.tenants} tenants x "
          f"{layout.namespaces} namespaces; {args.shards} metadata shards; data in {root}; "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    memory = Memory()
    rng = random.Random(args.seed)
    figures: dict = {"shards": args.shards, "concurrency": args.concurrency, "load_start": round(os.getloadavg()[0], 1)}
    try:
        t0 = time.perf_counter()
        broker = await Broker(root, args.shards).start()
        if args.existing:
            figures.update({"records": layout.records, "existing_open_s": round(time.perf_counter() - t0, 2)})
        else:
            figures.update(await create_topics(broker, layout, args, memory))
        rss, anon = memory.sample()
        figures.update({"rss_after_create_mb": mb(rss), "anon_after_create_mb": mb(anon)})
        allocated, apparent = disk_usage(str(root / "meta"))
        figures.update({"disk_mb": mb(allocated), "disk_apparent_mb": mb(apparent),
                        "disk_bytes_per_record": round(allocated / max(figures["records"], 1))})
        print(f"  created: {figures}", flush=True)
        figures["load_lookups"] = round(os.getloadavg()[0], 1)
        figures.update(await measure_lookups(broker, layout, args.lookups, rng))
        picked = sorted({(f"tenant-{rng.randrange(layout.tenants)}", f"ns-{rng.randrange(layout.namespaces)}")
                         for _ in range(3)})
        figures.update(await measure_listing(broker, args.page_size, picked))
        print(f"  lookups and listing done: rss {mb(memory.sample()[0])} MB", flush=True)
        await broker.close()

        # Restart: the engine opened again, the broker started, the first lookup (of a topic nobody owns).
        t0 = time.perf_counter()
        broker = await Broker(root, args.shards).start()
        started = time.perf_counter()
        conn = await broker.connect()
        name, partitions = layout.topic(rng.randrange(layout.names))
        await lookup(conn, name, partitions, rng)
        first = time.perf_counter()
        rss, anon = memory.sample()
        figures.update({"restart_engine_open_s": round(broker.engine_opened - t0, 2),
                        "restart_broker_start_s": round(started - broker.engine_opened, 2),
                        "restart_first_lookup_ms": round((first - started) * 1000, 1),
                        "restart_to_first_lookup_s": round(first - t0, 2),
                        "rss_after_restart_mb": mb(rss), "anon_after_restart_mb": mb(anon)})
        await broker.close()
    finally:
        memory.stop()
        if args.keep or args.existing:
            print(f"  kept {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)
    figures.update({"peak_rss_mb": mb(memory.peak_rss), "peak_anon_mb": mb(memory.peak_anon),
                    "load_end": round(os.getloadavg()[0], 1)})
    figures["rss_target"] = "met" if memory.peak_rss < RSS_TARGET else "not met"
    figures["lookup_p99_target"] = "met" if max(figures["lookup_first_p99_ms"], figures["partitioned_metadata_p99_ms"]) \
        <= LOOKUP_P99_TARGET_MS else "not met"
    return figures
