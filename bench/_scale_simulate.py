"""Part ``simulate`` of ``bench/scale.py``: per-shard rates measured here, the plan for 100M topic
records (``_scale_plan``), and that plan scaled down and run on the embedded engine's real shards.

Every engine is a fresh durable embedded engine (LMDB, every group commit fsync'd) under ``--dir``.

1. **Admin path**, for engines of ``--sim-admin-shards`` shards: a broker in this process creates
   ``--sim-admin-records`` topic records through the admin functions (``_scale_records.create_topics``;
   layout from the ``records`` options, in ``--sim-tenants`` x ``--sim-namespaces``). Figures: records
   per second, overall and per shard; cores the process used and its CPU per record; metadata
   operations per record and per group commit; commit rounds per block of stream ids; bytes per
   record. The first engine also counts the metadata operations of a lookup (PARTITIONED_METADATA then
   LOOKUP over a Pulsar connection), of a topic it claims and of a topic it owns.
2. **Per-shard rates**: the metadata operations of a creation (the admin path's for a non-partitioned
   topic: three reads, two writes), of a claim (read the owner record, put it ephemeral) and of
   lookups (reads of existing records) replayed on an engine of ONE shard with no broker,
   ``--sim-inflight`` at a time: what a shard sustains when its callers are many.
3. **The plan** (``_scale_plan.plan``) from those rates and the ``--plan-*`` targets, then **the
   simulation**: one metadata server of the plan (its shards per server) in one engine, holding
   ``1/--sim-scale`` of the plan's topic records, created through the admin path. Checks: the records'
   spread over the shards; bytes per record against the 10M run's; the mean shard extrapolated
   to the plan's records per shard; and the aggregate rate of replayed creations on the server's
   shards against ``machine_rate`` (fsync-bound shards add up until the process's one core of Python
   is used up), alternating with one shard ``--sim-rounds`` times and keeping the best of each (the
   machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

import lmdb
from _scale_plan import (BYTES_PER_RECORD_AT_10M, ShardRates, Targets, machine_rate, plan, spread_limit,
                         within)  # bench/ is on sys.path
from _scale_records import Broker, Layout, Memory, create_topics, lookup

from nereus.broker.cluster.owner_lookup import owner_key
from nereus.ledger.naming import TopicName
from nereus.ledger.policies import policies_key
from nereus.meta import EXPECT_ABSENT, open_engine
from nereus.storage import records as stream_records
from nereus.storage.service import STREAM_ID_BLOCK
from nereus.topics import partitioned_key

RATE_TOLERANCE = 0.25  # the machine is shared: the same measurement varies by this much from run to run
BYTES_TOLERANCE = 0.15
LOOKUPS_COUNTED = 200  # topics looked up twice (claimed, then owned) to count a lookup's metadata operations
OWNER_VALUE = b'{"broker":"simulated","incarnation":"1"}'


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--sim-admin-shards", default="1,2,4",
                       help="shard counts of the engines topics are created in through the admin path")
    group.add_argument("--sim-admin-records", type=int, default=20_000, help="topic records created in each")
    group.add_argument("--sim-tenants", type=int, default=10)
    group.add_argument("--sim-namespaces", type=int, default=10, help="namespaces per tenant")
    group.add_argument("--sim-records", type=int, default=20_000,
                       help="creations, claims and lookups replayed to measure a shard's rates")
    group.add_argument("--sim-inflight", type=int, default=256, help="replayed operations' callers at once")
    group.add_argument("--sim-scale", type=int, default=5_000,
                       help="the simulated server holds 1/this of the plan's topic records")
    group.add_argument("--sim-rounds", type=int, default=2, help="rate measurements alternated in the simulation")
    defaults = Targets()
    group.add_argument("--plan-topics", type=int, default=defaults.topic_records, help="topic records planned for")
    group.add_argument("--plan-records-per-shard", type=int, default=defaults.records_per_shard)
    group.add_argument("--plan-create-rate", type=float, default=defaults.create_rate,
                       help="topic records per second wanted")
    group.add_argument("--plan-loaded-topics", type=int, default=defaults.loaded_topics)
    group.add_argument("--plan-failover-seconds", type=float, default=defaults.failover_seconds)
    group.add_argument("--plan-shards-per-server", type=int, default=defaults.shards_per_server)
    group.add_argument("--plan-replicas", type=int, default=defaults.replicas)


def targets_of(args: argparse.Namespace) -> Targets:
    return Targets(topic_records=args.plan_topics, records_per_shard=args.plan_records_per_shard,
                   create_rate=args.plan_create_rate, loaded_topics=args.plan_loaded_topics,
                   failover_seconds=args.plan_failover_seconds, shards_per_server=args.plan_shards_per_server,
                   replicas=args.plan_replicas)


# -- what an engine holds ---------------------------------------------------------------------------------
def shard_contents(meta_dir: Path) -> list[tuple[int, int]]:
    """(records, bytes of live B-tree pages) of each shard of a closed engine, from LMDB's own counts.

    Live pages, not the file: a small engine's file also holds the pages its many commits freed,
    which at 10M records are a rounding error.
    """
    out = []
    for path in sorted((meta_dir / "default").glob("shard-*"), key=lambda p: int(p.name.split("-")[1])):
        env = lmdb.open(str(path), readonly=True, lock=False, max_dbs=5)
        try:
            with env.begin() as txn:
                stats = [txn.stat(env.open_db(name, txn=txn, create=False))
                         for name in (b"kv", b"eph", b"sessions", b"meta", b"idx")]
                pages = sum(s["branch_pages"] + s["leaf_pages"] + s["overflow_pages"] for s in [env.stat(), *stats])
                out.append((stats[0]["entries"], pages * env.stat()["psize"]))
        finally:
            env.close()
    return out


class Counters:
    """Metadata operations and group commits of an engine's shards, and this process's CPU, since made."""

    def __init__(self, engine) -> None:
        self.shards = engine.namespace().shards
        self.ops0, self.commits0 = self.ops, self.commits
        self.cpu0, self.clock0 = time.process_time(), time.perf_counter()

    @property
    def ops(self) -> int:
        return sum(s.ops for s in self.shards)

    @property
    def commits(self) -> int:
        return sum(s.batches for s in self.shards)

    def taken(self) -> dict:
        seconds = time.perf_counter() - self.clock0
        return {"seconds": seconds, "cpu": time.process_time() - self.cpu0, "ops": self.ops - self.ops0,
                "commits": self.commits - self.commits0}


# -- 1. the admin path ------------------------------------------------------------------------------------
def layout_args(args: argparse.Namespace, records: int) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "topics": records, "tenants": args.sim_tenants,
                                 "namespaces": args.sim_namespaces})


async def lookup_ops(broker: Broker, layout: Layout, seed: int) -> tuple[float, float]:
    """Metadata operations of one lookup of a topic it claims, and of one it owns."""
    conn = await broker.connect()
    picked = random.Random(seed).sample(range(layout.names), min(LOOKUPS_COUNTED, layout.names))
    shards = broker.engine.namespace().shards
    counts = []
    for _ in ("claims", "owned"):
        ops0 = sum(s.ops for s in shards)
        for i in picked:  # the same partition of a partitioned topic both times
            await lookup(conn, *layout.topic(i), random.Random(i))
        counts.append((sum(s.ops for s in shards) - ops0) / len(picked))
    return counts[0], counts[1]


async def admin_run(args: argparse.Namespace, shards: int, records: int, root: Path, *,
                    count_lookups: bool = False) -> dict:
    """Topic records created through a broker's admin functions in a fresh engine of ``shards`` shards."""
    options = layout_args(args, records)
    layout = Layout(options)
    broker = await Broker(root, shards).start()
    memory = Memory()
    try:
        counters = Counters(broker.engine)
        created = await create_topics(broker, layout, options, memory)
        taken = counters.taken()
        run = {"shards": shards, "records": created["records"], "creates_per_s": created["creates_per_s"],
               "cpu_us_per_record": 1e6 * created["create_cpu_s"] / created["records"],
               "cores": created["create_cpu_s"] / created["create_seconds"],
               "ops_per_record": taken["ops"] / created["records"], "ops_per_commit": taken["ops"] / taken["commits"],
               # Commit rounds of each shard per block of stream ids: constant when the block's CAS paces creation.
               "rounds_per_id_block": taken["commits"] / shards / (created["records"] / STREAM_ID_BLOCK),
               "ms_per_round": 1000 * taken["seconds"] / (taken["commits"] / shards),
               "commits_per_record": taken["commits"] / created["records"]}
        if count_lookups:
            run["lookup_claim_ops"], run["lookup_owned_ops"] = await lookup_ops(broker, layout, args.seed)
    finally:
        memory.stop()
        await broker.close()
    contents = shard_contents(root / "meta")
    run["entries"] = [n for n, _ in contents]
    run["shard_bytes"] = [b for _, b in contents]
    run["bytes_per_record"] = sum(run["shard_bytes"]) / run["records"]
    return run


def print_admin(run: dict) -> None:
    print(f"  shards={run['shards']} {run['creates_per_s']:,.0f} records/s ({run['creates_per_s'] / run['shards']:,.0f} "
          f"per shard), {run['cores']:.2f} cores, {run['cpu_us_per_record']:.0f} us CPU/record, "
          f"{run['ops_per_record']:.2f} ops/record, {run['ops_per_commit']:.0f} ops/commit, "
          f"{run['rounds_per_id_block']:.1f} commit rounds of {run['ms_per_round']:.1f} ms per {STREAM_ID_BLOCK} "
          f"stream ids, "
          f"{run['bytes_per_record']:.0f} B/record; load {os.getloadavg()[0]:.1f}", flush=True)


def cpu_per_commit(runs: list[dict]) -> tuple[float, float]:
    """CPU microseconds per record = a + b x commits per record, fitted (least squares) over ``runs``:
    (a, b). More shards in one process spread the same operations over more, smaller commits."""
    xs, ys = [r["commits_per_record"] for r in runs], [r["cpu_us_per_record"] for r in runs]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / spread if spread else 0.0
    return my - b * mx, b


# -- 2. replayed operations ---------------------------------------------------------------------------------
def replay_name(i: int) -> str:
    return f"persistent://tenant-{i % 10}/ns-{i // 10 % 10}/replay-{i}"


async def create_step(meta, i: int) -> None:
    """The metadata operations ``topics.create_non_partitioned`` makes for one topic."""
    name = TopicName.parse(replay_name(i))
    await meta.get(policies_key(name.tenant, name.namespace))
    await meta.get(partitioned_key(name))
    await meta.get(stream_records.name_key(str(name)))
    await meta.put(stream_records.meta_key(i), stream_records.encode({"name": str(name), "created": 0}),
                   partition_key=stream_records.stream_partition(i))
    await meta.put(stream_records.name_key(str(name)), stream_records.encode({"id": i}),
                   expected_version_id=EXPECT_ABSENT)


async def claim_step(meta, i: int) -> None:
    """A claim: the owner record read, then put if absent, ephemeral (``claims._try_claim``)."""
    key = owner_key(replay_name(i))
    await meta.get(key)
    await meta.put(key, OWNER_VALUE, expected_version_id=EXPECT_ABSENT, ephemeral=True)


async def read_step(meta, i: int) -> None:
    """Two reads of existing records: the topic's owner record and its stream-name record."""
    await meta.get(owner_key(replay_name(i)))
    await meta.get(stream_records.name_key(replay_name(i)))


async def replay(engine, meta, step, items: list[int] | range, inflight: int) -> dict:
    """``step`` for every item, ``inflight`` at a time; the counters' figures and ``per_s`` (items)."""
    pending = iter(items)

    async def caller() -> None:
        for i in pending:  # shared: each item once
            await step(meta, i)

    counters = Counters(engine)
    await asyncio.gather(*(caller() for _ in range(inflight)))
    taken = counters.taken()
    return {**taken, "per_s": len(items) / taken["seconds"], "cpu_per_item": taken["cpu"] / len(items)}


def open_store(path: Path, shards: int):
    engine = open_engine(str(path), shards=shards)
    return engine, engine.client(identity="scale-simulate", session_timeout=60.0)


async def close_store(engine, meta) -> None:
    # The engine first: its sessions, and so the ephemeral records, stay for shard_contents to count.
    await engine.close()
    await meta.close()


async def shard_rates(args: argparse.Namespace, parent: Path) -> dict:
    """Creations, claims and lookups replayed on one shard."""
    n, inflight = args.sim_records, args.sim_inflight
    root = Path(tempfile.mkdtemp(prefix="one-shard-", dir=parent)) / "meta"
    out = {}
    engine, meta = open_store(root, 1)
    out["create"] = await replay(engine, meta, create_step, range(n), inflight)
    await close_store(engine, meta)
    before = sum(b for _, b in shard_contents(root))
    engine, meta = open_store(root, 1)
    out["claim"] = await replay(engine, meta, claim_step, range(n), inflight)
    await close_store(engine, meta)
    out["owner_bytes"] = (sum(b for _, b in shard_contents(root)) - before) / n
    engine, meta = open_store(root, 1)
    order = list(range(n))
    random.Random(args.seed).shuffle(order)
    out["read"] = await replay(engine, meta, read_step, order, inflight)
    await close_store(engine, meta)
    shutil.rmtree(root.parent, ignore_errors=True)
    for kind, ops in (("create", 5), ("claim", 2), ("read", 2)):
        r = out[kind]
        print(f"  {kind}: {r['per_s']:,.0f}/s ({ops} ops each, {r['ops'] / r['commits']:.0f} ops/commit, "
              f"{r['cpu'] / r['seconds']:.2f} cores)", flush=True)
    return out


# -- 3. the simulation ------------------------------------------------------------------------------------
async def simulated_rates(args: argparse.Namespace, server_meta: Path, shards: int, parent: Path) -> dict:
    """Replayed creations on one fresh shard and on the server's shards, alternated; the best of each."""
    one, many = [], []
    for r in range(args.sim_rounds):
        items = range((r + 1) * 10_000_000, (r + 1) * 10_000_000 + args.sim_records)  # names nobody has
        root = Path(tempfile.mkdtemp(prefix="one-shard-", dir=parent)) / "meta"
        engine, meta = open_store(root, 1)
        one.append(await replay(engine, meta, create_step, items, args.sim_inflight))
        await close_store(engine, meta)
        shutil.rmtree(root.parent, ignore_errors=True)
        engine, meta = open_store(server_meta, shards)
        many.append(await replay(engine, meta, create_step, items, args.sim_inflight))
        await close_store(engine, meta)
        print(f"  round {r + 1}: 1 shard {one[-1]['per_s']:,.0f}/s, {shards} shards {many[-1]['per_s']:,.0f}/s "
              f"({many[-1]['cpu'] / many[-1]['seconds']:.2f} cores); load {os.getloadavg()[0]:.1f}", flush=True)
    return {"one": max(one, key=lambda r: r["per_s"]), "many": max(many, key=lambda r: r["per_s"])}


def verdict(ok: bool) -> str:
    return "ok" if ok else "off"


async def simulate(args: argparse.Namespace, the_plan, targets: Targets, rates: ShardRates, parent: Path) -> dict:
    shards = targets.shards_per_server
    records = targets.topic_records // args.sim_scale
    root = Path(tempfile.mkdtemp(prefix="server-", dir=parent))
    print(f"simulate: one metadata server of the plan, {shards} shards, 1/{args.sim_scale:,} of its topic records: "
          f"{records:,}", flush=True)
    run = await admin_run(args, shards, records, root)
    print_admin(run)
    entries = run["entries"]
    mean = sum(entries) / len(entries)
    spread, spread_max = max(entries) / mean, spread_limit(mean)
    measured = await simulated_rates(args, root / "meta", shards, parent)
    shutil.rmtree(root, ignore_errors=True)

    one, many = measured["one"], measured["many"]
    predicted, regime = machine_rate(shards, one["per_s"], many["cpu_per_item"])
    # A shard's bytes at the plan's size: this server's mean shard scaled to the plan's records per shard,
    # its largest by the spread hashing leaves at that size (the plan's figure is the mean).
    shard_bytes = sum(run["shard_bytes"]) / shards
    extrapolated = shard_bytes * the_plan.records_per_shard / (run["records"] / shards)
    planned = the_plan.records_per_shard * rates.bytes_per_record
    pages = max(run["shard_bytes"]) / shard_bytes
    checks = {
        "spread": (spread <= spread_max,
                   f"records per shard max/mean {spread:.3f} (limit {spread_max:.3f} at {mean:,.0f} a shard; "
                   f"at the plan's {the_plan.records_per_shard:,.0f} a shard: "
                   f"{spread_limit(the_plan.records_per_shard):.4f})"),
        "rate": (within(many["per_s"], predicted, RATE_TOLERANCE),
                 f"predicted {predicted:,.0f}/s ({regime}: {shards} x {one['per_s']:,.0f}/s of one shard, "
                 f"1 core / {1e6 * many['cpu_per_item']:.0f} us CPU per creation, {1e6 * one['cpu_per_item']:.0f} us "
                 f"with one shard), simulated {many['per_s']:,.0f}/s, "
                 f"ratio {many['per_s'] / predicted:.2f} (tolerance {RATE_TOLERANCE:.0%})"),
        "bytes": (within(run["bytes_per_record"], BYTES_PER_RECORD_AT_10M, BYTES_TOLERANCE),
                  f"{run['bytes_per_record']:.0f} B/record here, {BYTES_PER_RECORD_AT_10M} at 10M records "
                  f"(tolerance {BYTES_TOLERANCE:.0%})"),
        "shard size": (within(extrapolated, planned, BYTES_TOLERANCE),
                       f"a shard of {shard_bytes / 2**20:.2f} MiB here, extrapolated to "
                       f"{the_plan.records_per_shard:,.0f} records {extrapolated / 2**20:,.0f} MiB (the largest "
                       f"{extrapolated * spread_limit(the_plan.records_per_shard) / 2**20:,.0f}), planned "
                       f"{planned / 2**20:,.0f} MiB (tolerance {BYTES_TOLERANCE:.0%}; the largest shard here has "
                       f"{pages:.2f} x the mean's pages: a small B-tree's pages are filled unevenly)"),
    }
    for name, (ok, text) in checks.items():
        print(f"  check {name}: {text}: {verdict(ok)}", flush=True)
    return {"sim_shards": shards, "sim_records": run["records"], "sim_admin_creates_per_s": run["creates_per_s"],
            "sim_spread": round(spread, 3), "sim_one_shard_per_s": round(one["per_s"]),
            "sim_predicted_per_s": round(predicted), "sim_regime": regime, "sim_per_s": round(many["per_s"]),
            "sim_cores": round(many["cpu"] / many["seconds"], 2),
            "sim_cpu_us_per_creation": round(1e6 * many["cpu_per_item"]),
            "one_shard_cpu_us_per_creation": round(1e6 * one["cpu_per_item"]),
            "sim_bytes_per_record": round(run["bytes_per_record"]),
            **{f"check_{name.replace(' ', '_')}": verdict(ok) for name, (ok, _) in checks.items()}}


def print_plan(p, t: Targets) -> None:
    gib = 2**30
    print(f"plan for {t.topic_records:,} topic records:", flush=True)
    print(f"  shards {p.shards} (set by {p.bound}: size {p.shards_for_size}, creation rate {p.shards_for_creates}, "
          f"failover {p.shards_for_failover}); {p.records_per_shard:,.0f} records, {p.bytes_per_shard / gib:.2f} GiB "
          f"a shard", flush=True)
    print(f"  metadata servers {p.servers} ({t.replicas} replicas, {p.shard_replicas_per_server:.1f} shard replicas "
          f"each): {p.disk_per_server / gib:.1f} GiB disk, {p.memory_per_server / gib:.1f} GiB memory each", flush=True)
    print(f"  brokers {p.brokers} for {t.loaded_topics:,} loaded topics; a failed broker's {p.failover_topics:,.0f} "
          f"claimed and looked up again in {p.reclaim_seconds:.1f} s; all records created in "
          f"{p.create_seconds / 3600:.1f} h (bound by {p.create_bound})", flush=True)
    print(f"  every shard in one process instead: created in {p.one_process_create_seconds / 3600:.1f} h, a failed "
          f"broker's topics claimed and looked up again in {p.one_process_reclaim_seconds:.0f} s", flush=True)


async def run(args: argparse.Namespace) -> dict:
    parent = Path(tempfile.mkdtemp(prefix="scale-simulate-", dir=args.dir))
    targets = targets_of(args)
    figures: dict = {"load_start": round(os.getloadavg()[0], 1)}
    try:
        print(f"simulate: admin path, {args.sim_admin_records:,} topic records per engine; data in {parent}",
              flush=True)
        admin = []
        for i, shards in enumerate(int(s) for s in args.sim_admin_shards.split(",")):
            admin.append(await admin_run(args, shards, args.sim_admin_records,
                                         Path(tempfile.mkdtemp(prefix=f"admin-{shards}-", dir=parent)),
                                         count_lookups=i == 0))
            print_admin(admin[-1])
        if len(admin) > 1:
            base, per_commit = cpu_per_commit(admin)
            print(f"  CPU per record = {base:.0f} us + {per_commit:.0f} us per group commit (a commit's share "
                  f"grows with the shards)", flush=True)
            figures.update({"cpu_us_per_record_base": round(base), "cpu_us_per_commit": round(per_commit)})
        claim_ops, owned_ops = admin[0]["lookup_claim_ops"], admin[0]["lookup_owned_ops"]
        print(f"  a lookup: {claim_ops:.2f} metadata ops when it claims the topic, {owned_ops:.2f} when owned",
              flush=True)
        print(f"simulate: one shard, no broker, {args.sim_inflight} callers", flush=True)
        one = await shard_rates(args, parent)
        rates = ShardRates(
            creates_per_s=one["create"]["per_s"],
            lookups_per_s=one["read"]["per_s"] * 2 / owned_ops,
            claims_per_s=one["claim"]["per_s"],
            bytes_per_record=sum(r["bytes_per_record"] for r in admin) / len(admin),
            bytes_per_owner_record=one["owner_bytes"],
            broker_creates_per_s=max(r["creates_per_s"] for r in admin),
            create_cpu_s=one["create"]["cpu_per_item"],
            lookup_cpu_s=one["read"]["cpu_per_item"] / 2 * owned_ops,
            claim_cpu_s=one["claim"]["cpu_per_item"])
        print(f"  per shard: {rates.creates_per_s:,.0f} creations/s, {rates.lookups_per_s:,.0f} lookups/s, "
              f"{rates.claims_per_s:,.0f} claims/s; {rates.bytes_per_record:.0f} B per topic record, "
              f"{rates.bytes_per_owner_record:.0f} B per ownership record", flush=True)
        the_plan = plan(rates, targets)
        print_plan(the_plan, targets)
        for r in admin:
            figures.update({f"admin{r['shards']}_creates_per_s": r["creates_per_s"],
                            f"admin{r['shards']}_cores": round(r["cores"], 2),
                            f"admin{r['shards']}_ms_per_round": round(r["ms_per_round"], 1)})
        figures.update({"ops_per_record": round(admin[0]["ops_per_record"], 2),
                        "lookup_owned_ops": round(owned_ops, 2), "lookup_claim_ops": round(claim_ops, 2),
                        "shard_creates_per_s": round(rates.creates_per_s),
                        "shard_lookups_per_s": round(rates.lookups_per_s),
                        "shard_claims_per_s": round(rates.claims_per_s),
                        "bytes_per_record": round(rates.bytes_per_record),
                        "bytes_per_owner_record": round(rates.bytes_per_owner_record),
                        "plan_shards": the_plan.shards, "plan_servers": the_plan.servers,
                        "plan_brokers": the_plan.brokers,
                        "plan_create_hours": round(the_plan.create_seconds / 3600, 1),
                        "plan_reclaim_s": round(the_plan.reclaim_seconds, 1),
                        "one_process_create_hours": round(the_plan.one_process_create_seconds / 3600, 1),
                        "one_process_reclaim_s": round(the_plan.one_process_reclaim_seconds)})
        figures.update(await simulate(args, the_plan, targets, rates, parent))
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    figures["load_end"] = round(os.getloadavg()[0], 1)
    return figures
