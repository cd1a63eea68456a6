"""Geo-replication between two standalones (east -> west) with the official Pulsar client.

Two ``nereus standalone`` processes on this machine, started with ``--cluster-name
east`` and ``--cluster-name west`` and made known to each other through the admin
API (``PUT /admin/v2/clusters/{name}``); namespace ``georep/repl`` replicates between
them both ways (``--one-way``: west's copy of it lists west only, so west runs no
replicator back to east), ``georep/local`` exists in east only. Three parts:

* ``throughput``: ``--messages`` 1 KiB messages (batching on) sent to east by
  ``--producers`` processes, each with its own client, into a topic of the
  non-replicated namespace (the baseline: messages acknowledged over the wall time
  from the first send to the last receipt) and the same load into a replicated
  topic, timed from the first send until west's topic stats count every message
  (``msgInCounter``); the two alternate in order over ``--rounds`` (medians are
  reported). Target: replication >= 0.8 x the local produce rate. Beside it,
  the catch-up rate: the same load stored first in a namespace east does not yet
  replicate (``georep/later``), then ``west`` added to its replication clusters and
  timed until west counts every message (the replicator alone, no producer beside
  it); and the CPU time per message of the producer processes and of each standalone
  (``/proc``): on one machine west and the replicator take their CPU from the same
  two cores as the producers and east. ``--pin`` gives west the last CPU to itself and
  keeps east, the producer processes and this script on the others, as two regions'
  machines would be (both cases run on the same CPUs).
* ``delay``: east publishes 1 KiB messages at a paced ``--rate`` for
  ``--delay-seconds``, each carrying its send time; a consumer of west (its own
  process, subscribed before the first send) takes receive time minus send time
  (same host, same clock): p50 / p99 / max. Target p99 <= 1 s. Beside it: east's own
  send -> receipt latency of the same messages, each standalone's CPU time per message,
  and how often each replicator wrote its cursor (the metadata record's modification
  count): east's towards west and, both ways, west's towards east, which sends nothing.
* ``kills``: a producer with a fixed name and no send timeout (east deduplicates its
  resends) sends numbered messages to a replicated topic at ``--kill-rate`` while the
  east standalone, where the replicator runs, is killed with SIGKILL ``--kills`` times
  at random moments and started again on the same ports and data. Afterwards the
  producer is flushed, east's replicator is left to catch up, east's topic is read
  whole (a reader from the earliest message) and west's by a new subscription from
  the earliest position. Counted against east's content: duplicates and losses in
  west (targets 0, and the same order); beside that, acknowledged messages missing
  from east and numbers east stored twice (not replication's doing), and how many
  SENDs west dropped as duplicates (``pulsar_deduplicated_messages_total``).

Usage: .venv/bin/python bench/georep.py [--only throughput,delay,kills] [--messages 200000]
       [--producers 2] [--rounds 1] [--rate 5000] [--delay-seconds 30] [--kills 10]
       [--kill-rate 2000] [--seed 1] [--one-way] [--pin] [--keep]
A run with the defaults takes about 2 minutes. The last line is ``key=value`` pairs; a
part that fails prints why and the others still run. ``--keep`` keeps the work
directory (the standalones' logs, the clients' log).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import multiprocessing
import os
import random
import shutil
import struct
import sys
import tempfile
import threading
import time
import urllib.error
from pathlib import Path

import pulsar

from _procs import cpu_seconds, pin_process, wait_for  # bench/ is on sys.path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nereus.ledger.cursor import cursor_key  # noqa: E402
from nereus.meta import connect  # noqa: E402
from nereus.pulsar.replication.replicator import cursor_name  # noqa: E402
from nereus.storage.records import stream_partition  # noqa: E402
from tests.replication.geo import Cluster, admin, introduce, replicate_namespace, stats  # noqa: E402

TENANT = "georep"
REPLICATED = f"{TENANT}/repl"
LOCAL = f"{TENANT}/local"
LATER = f"{TENANT}/later"  # replicated to west only once a backlog is stored (the catch-up case)
PAYLOAD = 1024
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
#: Where this process's clients log (set by main): the C++ client (3.13) logs through the logger of
#: the first client a process made, so every client here gets this one; east's kills would otherwise
#: fill the console with refused connections.
CLIENT_LOG: Path | None = None
#: With --pin: the CPUs of east, the producer processes and this script (west has the others).
PRODUCER_CPUS: set[int] | None = None


def client_logger():
    return pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(CLIENT_LOG)) if CLIENT_LOG is not None else QUIET


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def replication_of(node, topic: str) -> dict | None:
    """East's replicator stats towards west for ``topic``; None while the topic is not served."""
    try:
        return stats(node, topic).get("replication", {}).get("west")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def cursor_writes(cluster, topic: str, remote: str) -> int | None:
    """How many times the replication cursor towards ``remote`` of ``topic`` in ``cluster`` was written
    (its metadata record's modification count); None while there is no such cursor."""
    async def read() -> int | None:
        sid = admin(cluster.node, "GET", f"/persistent/{topic.split('://', 1)[1]}/internalStats")["streamId"]
        store = connect(f"oxia://127.0.0.1:{cluster.node.ports['oxia']}")
        try:
            record = await store.get(cursor_key(sid, cursor_name(remote)), partition_key=stream_partition(sid))
        finally:
            await store.close()
        return record.version.modifications_count if record is not None else None

    try:
        return asyncio.run(read())
    except Exception:  # noqa: BLE001 - a figure beside the point: missing, not fatal
        return None


def replicator_connected(east, topic: str, timeout: float = 60) -> None:
    if not wait_for(lambda: (r := replication_of(east.node, topic)) and r["connected"], timeout):
        raise RuntimeError(f"the replicator of {topic} did not connect to west in {timeout:.0f} s")


# -- part 1: throughput -------------------------------------------------------------------------------------
def _produce_worker(url: str, topic: str, count: int, barrier, results, cpus: set[int] | None) -> None:
    """One producer process (its own client): send ``count`` messages; report (first send, last receipt,
    acked, CPU seconds of the process while sending)."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    client = pulsar.Client(url, io_threads=1, operation_timeout_seconds=30, logger=QUIET)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_allowed_size_in_bytes=128 * 1024,
                                      batching_max_publish_delay_ms=5, max_pending_messages=20000,
                                      block_if_queue_full=True)
    payload = b"x" * PAYLOAD
    lock = threading.Lock()
    done = threading.Event()
    state = {"remaining": count, "acked": 0, "last": 0.0}

    def receipt(result, _msg_id) -> None:
        with lock:
            state["remaining"] -= 1
            if result == pulsar.Result.Ok:
                state["acked"] += 1
                state["last"] = time.time()
            if state["remaining"] == 0:
                done.set()

    barrier.wait(60)
    start, cpu = time.time(), time.process_time()
    for _ in range(count):
        producer.send_async(payload, receipt)
    producer.flush()
    done.wait(300)
    cpu = time.process_time() - cpu
    producer.close()
    client.close()
    results.put((start, state["last"], state["acked"], cpu))


def west_count(west, topic: str) -> int:
    """West's ``msgInCounter`` of ``topic``; 0 while west has no such topic."""
    try:
        return stats(west.node, topic)["msgInCounter"]
    except (urllib.error.URLError, OSError, ValueError):
        return 0


def produce(url: str, topic: str, count: int, processes: int, west=None) -> dict[str, float]:
    """``count`` messages sent by ``processes`` producer processes at once. Returns the first send and last
    receipt (wall time) and, given ``west`` (a Cluster), the moment west's stats of the topic count
    every message more than before."""
    west_before = west_count(west, topic) if west is not None else 0
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    share = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
    workers = [ctx.Process(target=_produce_worker, args=(url, topic, n, barrier, results, PRODUCER_CPUS))
               for n in share]
    for worker in workers:
        worker.start()
    west_done = None
    if west is not None:  # polled from here while the producers run: the first moment west has all
        west_done = wait_for(lambda: west_count(west, topic) - west_before >= count and time.time(),
                             timeout=600, interval=0.05)
    try:
        reports = [results.get(timeout=600) for _ in workers]
    finally:
        for worker in workers:
            worker.join(60)
    acked = sum(r[2] for r in reports)
    if acked != count:
        raise RuntimeError(f"{count - acked} of {count} messages not acknowledged on {topic}")
    out = {"start": min(r[0] for r in reports), "acked": max(r[1] for r in reports),
           "client_cpu": sum(r[3] for r in reports)}
    if west is not None:
        if west_done is None:
            raise RuntimeError(f"west did not receive all {count} messages of {topic} in 600 s")
        out["west"] = west_done
    return out


def run_throughput(args, east, west) -> dict[str, float]:
    url = east.node.url
    client = pulsar.Client(url, io_threads=1, logger=client_logger())
    pids = {"east": east.node.proc.pid, "west": west.node.proc.pid}
    rounds = collections.defaultdict(list)

    def cpu_per_message(before: dict[str, float], case: str) -> None:
        for name, pid in pids.items():
            rounds[f"cpu_us_per_msg_{name}_{case}"].append((cpu_seconds(pid) - before[name]) / args.messages * 1e6)

    # Warm-up (not measured): the first load of a run pays for page faults, imports and first lookups.
    warm = max(1000, args.messages // 10)
    for namespace in (LOCAL, REPLICATED):
        produce(url, f"persistent://{namespace}/warm-up", warm, args.producers)

    for rnd in range(args.rounds):
        local_topic = f"persistent://{LOCAL}/throughput-{rnd}"
        repl_topic = f"persistent://{REPLICATED}/throughput-{rnd}"
        later_topic = f"persistent://{LATER}/catch-up-{rnd}"
        # Load the topics first: the replicator's start (lookup, producer in west) is not measured,
        # and the catch-up topic's replicator, made later, starts from the end at load (0).
        holders = [client.create_producer(t) for t in (local_topic, repl_topic, later_topic)]
        replicator_connected(east, repl_topic)

        # The order alternates between rounds, so that a machine getting busier or quieter during
        # the run favours neither case.
        for case in (("local", "repl") if rnd % 2 == 0 else ("repl", "local")):
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            if case == "local":
                times = produce(url, local_topic, args.messages, args.producers)
                local = args.messages / (times["acked"] - times["start"])
            else:
                times = repl_times = produce(url, repl_topic, args.messages, args.producers, west=west)
                replicated = args.messages / (times["west"] - times["start"])
                produced = args.messages / (times["acked"] - times["start"])
            cpu_per_message(before, case)
            rounds[f"cpu_us_per_msg_clients_{case}"].append(times["client_cpu"] / args.messages * 1e6)

        # Catch-up: the same messages stored in east first, then the namespace replicated to west:
        # the replicator alone, no producer beside it.
        produce(url, later_topic, args.messages, args.producers)
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        began = time.time()
        admin(east.node, "POST", f"/namespaces/{LATER}/replication", ["east", "west"])
        caught_up = wait_for(lambda: west_count(west, later_topic) >= args.messages and time.time(), timeout=600,
                             interval=0.05)
        if not caught_up:
            raise RuntimeError(f"west did not receive the {args.messages} messages of {later_topic} in 600 s")
        catch_up = args.messages / (caught_up - began)
        cpu_per_message(before, "catch_up")
        admin(east.node, "POST", f"/namespaces/{LATER}/replication", ["east"])  # the next round's topic waits again
        for holder in holders:
            holder.close()

        rounds["local_produce_msgs_s"].append(local)
        rounds["replicated_msgs_s"].append(replicated)
        rounds["replicated_produce_msgs_s"].append(produced)
        rounds["throughput_ratio"].append(replicated / local)
        rounds["catch_up_msgs_s"].append(catch_up)
        rounds["catch_up_ratio"].append(catch_up / local)
        cpu = {k[len("cpu_us_per_msg_"):]: v[-1] for k, v in rounds.items() if k.startswith("cpu_")}
        # Cores kept busy by the clients and both standalones together: near 2 on this machine means
        # the rate is what the CPU allows.
        for case, rate in (("local", local), ("repl", replicated)):
            rounds[f"cores_busy_{case}"].append(
                sum(cpu[f"{who}_{case}"] for who in ("clients", "east", "west")) * rate / 1e6)
        print(f"  round {rnd + 1}: local produce {local:,.0f} msgs/s; replicated: east acked at {produced:,.0f} "
              f"msgs/s, west held all at {replicated:,.0f} msgs/s ({repl_times['west'] - repl_times['acked']:+.2f} s after "
              f"east's last receipt), ratio {replicated / local:.2f}; catch-up of a stored backlog "
              f"{catch_up:,.0f} msgs/s ({catch_up / local:.2f})\n"
              f"    CPU us/msg local: clients {cpu['clients_local']:.1f}, east {cpu['east_local']:.1f}, west "
              f"{cpu['west_local']:.1f}; replicated: clients {cpu['clients_repl']:.1f}, east {cpu['east_repl']:.1f}, "
              f"west {cpu['west_repl']:.1f}; catch-up: east {cpu['east_catch_up']:.1f}, west {cpu['west_catch_up']:.1f}; "
              f"cores busy: local {rounds['cores_busy_local'][-1]:.2f}, replicated {rounds['cores_busy_repl'][-1]:.2f}",
              flush=True)
    client.close()
    figures = {key: sorted(values)[len(values) // 2] for key, values in rounds.items()}  # medians
    # What the ratio would be if the machine's CPU alone set both rates: on one host every message
    # replicated also costs west's CPU (and the replicator's in east), taken from the same cores.
    # Pinned (--pin), west has a CPU of its own: only the clients' and east's CPU compete.
    sharing = ("clients", "east") if PRODUCER_CPUS else ("clients", "east", "west")
    total = {case: sum(figures[f"cpu_us_per_msg_{who}_{case}"] for who in sharing) for case in ("local", "repl")}
    figures["cpu_bound_ratio"] = total["local"] / total["repl"]
    return figures


# -- part 2: replication delay -----------------------------------------------------------------------------------
STAMP = struct.Struct("<dQ")  # send time (epoch seconds), index


def _delay_consumer(url: str, topic: str, total: int, ready, results) -> None:
    """West's consumer (its own process): receive ``total`` messages; report receive - send time per
    index (-1: never received) and how many came twice."""
    client = pulsar.Client(url, io_threads=1, logger=QUIET)
    consumer = client.subscribe(topic, "delay", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=5000)
    ready.set()
    delays = [-1.0] * total
    seen = twice = 0
    while seen < total:
        try:
            message = consumer.receive(timeout_millis=60_000)
        except pulsar.Timeout:
            break
        now = time.time()
        sent, index = STAMP.unpack_from(message.data())
        if delays[index] >= 0:
            twice += 1
        else:
            delays[index] = now - sent
            seen += 1
        consumer.acknowledge(message)
    client.close()
    results.put((delays, twice))


def run_delay(args, east, west) -> dict[str, float]:
    topic = f"persistent://{REPLICATED}/delay"
    total = int(args.rate * args.delay_seconds)
    client = pulsar.Client(east.node.url, io_threads=1, logger=client_logger())
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                      max_pending_messages=50000, block_if_queue_full=True)
    replicator_connected(east, topic)
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    consumer = ctx.Process(target=_delay_consumer, args=(west.node.url, topic, total, ready, results))
    consumer.start()
    if not ready.wait(60):
        raise RuntimeError("west's consumer did not subscribe")

    # East's view beside it: its replication delay and backlog, sampled once a second.
    sampled = {"delay_s": 0, "backlog": 0}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.wait(1.0):
            r = replication_of(east.node, topic)
            if r:
                sampled["delay_s"] = max(sampled["delay_s"], r["replicationDelayInSeconds"])
                sampled["backlog"] = max(sampled["backlog"], r["replicationBacklog"])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # Replication cursor writes over the run: east's towards west and, replicating both ways,
    # west's towards east (which sends nothing back: everything it reads came from east).
    writes_before = {"east": cursor_writes(east, topic, "west"), "west": cursor_writes(west, topic, "east")}
    cpu_before = {"east": cpu_seconds(east.node.proc.pid), "west": cpu_seconds(west.node.proc.pid)}
    began = time.monotonic()
    filler = b"x" * (PAYLOAD - STAMP.size)
    acked = [0.0] * total
    sent = [0.0] * total
    failures = []

    def receipt_for(i: int):
        def receipt(result, _msg_id) -> None:
            acked[i] = time.time()
            if result != pulsar.Result.Ok:
                failures.append(result)
        return receipt

    start = time.monotonic()
    i = 0
    while i < total:
        due = min(total, int((time.monotonic() - start) * args.rate) + 1)
        while i < due:
            sent[i] = now = time.time()
            producer.send_async(STAMP.pack(now, i) + filler, receipt_for(i))
            i += 1
        time.sleep(0.0005)
    producer.flush()
    achieved = total / (time.monotonic() - start)
    delays, twice = results.get(timeout=300)
    consumer.join(30)
    elapsed = time.monotonic() - began
    cpu = {name: (cpu_seconds(c.node.proc.pid) - cpu_before[name]) / total * 1e6
           for name, c in (("east", east), ("west", west))}
    writes = {}
    for name, cluster, remote in (("east", east, "west"), ("west", west, "east")):
        after = cursor_writes(cluster, topic, remote)
        writes[name] = (after - (writes_before[name] or 0)) / elapsed if after is not None else -1.0
    sampling.set()
    sampler.join(5)
    producer.close()
    client.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed during the delay run")
    got = [d for d in delays if d >= 0]
    to_receipt = [a - s for s, a in zip(sent, acked) if a]
    # The worst second: the send second whose messages waited longest (p99 within it).
    by_second: dict[int, list[float]] = collections.defaultdict(list)
    for s, d in zip(sent, delays):
        if d >= 0:
            by_second[int(s - sent[0])].append(d)
    worst_second, worst = max(((sec, percentile(v, 0.99)) for sec, v in by_second.items()), key=lambda x: x[1])
    figures = {"delay_rate_msgs_s": achieved, "delay_p50_ms": percentile(got, 0.5) * 1000,
               "delay_p99_ms": percentile(got, 0.99) * 1000, "delay_max_ms": max(got) * 1000,
               "delay_missing": total - len(got), "delay_duplicates": twice,
               "east_ack_p50_ms": percentile(to_receipt, 0.5) * 1000,
               "east_ack_p99_ms": percentile(to_receipt, 0.99) * 1000,
               "east_stats_max_delay_s": sampled["delay_s"], "east_stats_max_backlog": sampled["backlog"],
               "delay_worst_second": worst_second, "delay_worst_second_p99_ms": worst * 1000,
               "cursor_writes_s_east_to_west": writes["east"], "cursor_writes_s_west_to_east": writes["west"],
               "cpu_us_per_msg_east_delay": cpu["east"], "cpu_us_per_msg_west_delay": cpu["west"]}
    return figures


# -- part 3: replicator kills ------------------------------------------------------------------------------------
class NumberedLoad:
    """A producer that lives through east's kills, sending numbered messages at a paced rate."""

    def __init__(self, client: pulsar.Client, topic: str, rate: float) -> None:
        self.producer = client.create_producer(
            topic, producer_name="georep-kills", send_timeout_millis=0, batching_enabled=True,
            batching_max_publish_delay_ms=5, max_pending_messages=1000, block_if_queue_full=True)
        self.rate = rate
        self.lock = threading.Lock()
        self.acked: set[int] = set()
        self.errors: collections.Counter = collections.Counter()
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _receipt_for(self, n: int):
        def receipt(result, _msg_id) -> None:
            with self.lock:
                if result == pulsar.Result.Ok:
                    self.acked.add(n)
                else:
                    self.errors[str(result)] += 1
        return receipt

    def _run(self) -> None:
        start = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate) + 1
            if self.sent >= due:
                time.sleep(0.002)
                continue
            try:  # blocks while east is down and the queue is full
                self.producer.send_async(str(self.sent).encode(), self._receipt_for(self.sent))
            except Exception as exc:  # noqa: BLE001 - counted; the load goes on
                self.errors[f"send {type(exc).__name__}"] += 1
                time.sleep(0.1)
                continue
            self.sent += 1
            if time.monotonic() - start > 1 and due - self.sent > self.rate:  # behind after an outage: no burst
                start = time.monotonic() - self.sent / self.rate

    def finish(self, timeout: float) -> bool:
        """Stop sending and wait until every message sent is acknowledged; False if that took too long."""
        self.stop.set()
        self.thread.join(timeout)
        flushed = threading.Thread(target=self.producer.flush, daemon=True)
        flushed.start()
        flushed.join(timeout)
        return not flushed.is_alive() and not self.thread.is_alive()


def read_east(client: pulsar.Client, topic: str) -> list[int]:
    """East's topic from its first message to its end, as stored."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest, receiver_queue_size=5000)
    out = []
    try:
        while reader.has_message_available():
            out.append(int(reader.read_next(timeout_millis=30_000).data()))
    except pulsar.Timeout:  # announced and not delivered: reported as what it read
        print(f"  PROBLEM: east's reader stalled after {len(out)} messages")
    reader.close()
    return out


def read_west(client: pulsar.Client, topic: str, expected: int) -> list[int]:
    """West's topic through a new subscription from the earliest position: up to ``expected`` messages
    (waiting up to 30 s for each), then whatever else arrives within 3 s."""
    consumer = client.subscribe(topic, f"verify-{time.time_ns()}", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=5000)
    out = []
    while True:
        try:
            message = consumer.receive(timeout_millis=30_000 if len(out) < expected else 3_000)
        except pulsar.Timeout:
            break
        out.append(int(message.data()))
        consumer.acknowledge(message)
    consumer.close()
    return out


def run_kills(args, east, west) -> dict[str, float]:
    topic = f"persistent://{REPLICATED}/kills"
    rng = random.Random(args.seed)
    client = pulsar.Client(east.node.url, io_threads=1, operation_timeout_seconds=120, logger=client_logger())
    load = NumberedLoad(client, topic, args.kill_rate)
    replicator_connected(east, topic)
    restarts = []
    for k in range(args.kills):
        time.sleep(rng.uniform(args.min_up, args.max_up))
        east.node.kill()
        began = time.monotonic()
        east.node.start(timeout=120)
        if PRODUCER_CPUS:
            pin_process(east.node.proc.pid, PRODUCER_CPUS)
        restarts.append(time.monotonic() - began)
        print(f"  kill {k + 1}/{args.kills}: {load.sent:,} sent, {len(load.acked):,} acknowledged; "
              f"east listening again after {restarts[-1]:.1f} s", flush=True)
    time.sleep(args.max_up)
    flushed = load.finish(timeout=180)
    finished = time.monotonic()
    caught_up = wait_for(lambda: (r := replication_of(east.node, topic)) and r["connected"]
                         and r["replicationBacklog"] == 0, timeout=180, interval=0.2)
    catch_up_s = time.monotonic() - finished if caught_up else float("nan")
    with load.lock:
        acked, errors = set(load.acked), dict(load.errors)
    client.close()

    reader = pulsar.Client(east.node.url, io_threads=1, logger=client_logger())
    east_stream = read_east(reader, topic)
    reader.close()
    west_client = pulsar.Client(west.node.url, io_threads=1, logger=client_logger())
    west_stream = read_west(west_client, topic, len(east_stream))
    west_client.close()

    in_east, in_west = collections.Counter(east_stream), collections.Counter(west_stream)
    # West was never restarted: its count of SENDs it dropped as duplicates shows how often a new
    # replicator sent again what west already had.
    dropped = 0.0
    try:
        for line in west.node.metrics().splitlines():
            if line.startswith(f'pulsar_deduplicated_messages_total{{topic="{topic}"}}'):
                dropped = float(line.split()[-1])
    except OSError:
        pass
    figures = {
        "kills": args.kills, "kill_sent": load.sent, "kill_acked": len(acked), "kill_east_stored": len(east_stream),
        "kill_west_stored": len(west_stream),
        "kill_west_duplicates": sum(max(0, c - in_east[n]) for n, c in in_west.items()),
        "kill_west_lost": sum(max(0, c - in_west[n]) for n, c in in_east.items()),
        "kill_west_in_east_order": int(west_stream == east_stream),
        "kill_east_lost_acked": len(acked - set(in_east)),
        "kill_east_duplicates": sum(c - 1 for c in in_east.values() if c > 1),
        "kill_east_unacked_stored": len(set(in_east) - acked),
        "kill_flushed": int(flushed), "kill_caught_up": int(bool(caught_up)), "kill_catch_up_s": catch_up_s,
        "kill_restart_median_s": sorted(restarts)[len(restarts) // 2] if restarts else 0.0,
        "kill_send_errors": sum(errors.values()), "kill_west_dropped_resends": dropped,
    }
    if errors:
        print(f"  send errors: {errors}")
    if not flushed:
        print("  PROBLEM: the producer did not get every receipt within 180 s after the last restart")
    if not caught_up:
        print(f"  PROBLEM: east's replicator did not catch up within 180 s: {replication_of(east.node, topic)}")
    if figures["kill_west_duplicates"] or figures["kill_west_lost"] or not figures["kill_west_in_east_order"]:
        extra = sorted(n for n, c in in_west.items() if c > in_east[n])[:20]
        missing = sorted(n for n, c in in_east.items() if c > in_west[n])[:20]
        print(f"  PROBLEM: west differs from east; first extra numbers {extra}, first missing {missing}")
    return figures


# -- main -----------------------------------------------------------------------------------------------------
def pin_clusters(east, west) -> None:
    """West on the last CPU alone; east, the producer processes and this script on the others. On one
    host the replicated case otherwise pays west's CPU from the cores the producers and east use, which
    two regions' machines do not share; the local case is measured on the same CPUs."""
    global PRODUCER_CPUS
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    PRODUCER_CPUS = set(cpus[:-1])
    pin_process(west.node.proc.pid, {cpus[-1]})
    pin_process(east.node.proc.pid, PRODUCER_CPUS)
    os.sched_setaffinity(0, PRODUCER_CPUS)
    print(f"pinned: west on CPU {cpus[-1]}; east, producers and this script on CPUs "
          f"{', '.join(map(str, sorted(PRODUCER_CPUS)))}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="throughput,delay,kills", help="parts to run, comma-separated")
    parser.add_argument("--messages", type=int, default=200_000, help="1 KiB messages per throughput case")
    parser.add_argument("--producers", type=int, default=2, help="producer processes per throughput case")
    parser.add_argument("--rounds", type=int, default=1, help="throughput rounds (medians are reported)")
    parser.add_argument("--rate", type=int, default=5_000, help="paced rate of the delay part (msgs/s)")
    parser.add_argument("--delay-seconds", type=float, default=30.0)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--kill-rate", type=int, default=2_000, help="msgs/s sent during the kill part")
    parser.add_argument("--min-up", type=float, default=1.0, help="shortest time east runs between kills (s)")
    parser.add_argument("--max-up", type=float, default=5.0, help="longest time east runs between kills (s)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--one-way", action="store_true",
                        help="west's namespaces list west only: east -> west, no replicator from west back to east")
    parser.add_argument("--pin", action="store_true",
                        help="west on the last CPU alone, east and every client on the others (two regions' "
                             "machines, as far as one host allows)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    parts = set(args.only.split(","))

    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} cores)"
          + ("  -- the machine is busy" if load[0] > 1.5 else ""), flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="georep-"))
    global CLIENT_LOG
    CLIENT_LOG = workdir / "client.log"
    east, west = Cluster("east", workdir), Cluster("west", workdir)
    figures: dict[str, float] = {"load_avg_1m": load[0]}
    try:
        east.start()
        west.start()
        introduce([east, west])
        replicate_namespace([east, west], REPLICATED)
        admin(east.node, "PUT", f"/namespaces/{LOCAL}")
        replicate_namespace([east, west], LATER)
        admin(east.node, "POST", f"/namespaces/{LATER}/replication", ["east"])
        if args.one_way:  # west runs no replicator back to east on these topics
            for namespace in (REPLICATED, LATER):
                admin(west.node, "POST", f"/namespaces/{namespace}/replication", ["west"])
        if args.pin:
            pin_clusters(east, west)
        print(f"east pid {east.node.proc.pid} ({east.node.url}), west pid {west.node.proc.pid} ({west.node.url}); "
              f"work directory {workdir}", flush=True)
        runs = {"throughput": (f"{args.messages:,} x 1 KiB, {args.producers} producer processes", run_throughput),
                "delay": (f"{args.rate:,} msgs/s for {args.delay_seconds:.0f} s", run_delay),
                "kills": (f"{args.kills} x kill -9 of east at {args.kill_rate:,} msgs/s", run_kills)}
        for part, (what, run) in runs.items():
            if part not in parts:
                continue
            print(f"{part}: {what}", flush=True)
            try:
                figures.update(run(args, east, west))
            except Exception as exc:  # noqa: BLE001 - reported; the other parts still run
                print(f"  PROBLEM: the {part} part failed: {exc!r}", flush=True)
                figures[f"{part}_failed"] = 1
                if not east.node.alive():
                    east.start()
    finally:
        east.stop()
        west.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print("\nsummary")
    if "throughput_ratio" in figures:
        met = figures["throughput_ratio"] >= 0.8
        print(f"  throughput (medians of {args.rounds} rounds): local produce {figures['local_produce_msgs_s']:,.0f} "
              f"msgs/s, replicated to west {figures['replicated_msgs_s']:,.0f} msgs/s; ratio (per round) "
              f"{figures['throughput_ratio']:.2f} "
              f"(target >= 0.8: {'met' if met else 'NOT met'}); east acked that load at "
              f"{figures['replicated_produce_msgs_s']:,.0f} msgs/s; the ratio if CPU alone decided (CPU per message "
              f"of clients + east{'' if PRODUCER_CPUS else ' + west'}, local / replicated): {figures['cpu_bound_ratio']:.2f}; a stored backlog "
              f"caught up at "
              f"{figures['catch_up_msgs_s']:,.0f} msgs/s ({figures['catch_up_ratio']:.2f} x local produce)")
    if "delay_p99_ms" in figures:
        met = figures["delay_p99_ms"] <= 1000 and not figures["delay_missing"]
        print(f"  delay at {figures['delay_rate_msgs_s']:,.0f} msgs/s: publish -> readable in west p50 "
              f"{figures['delay_p50_ms']:.0f} ms, p99 {figures['delay_p99_ms']:.0f} ms, max "
              f"{figures['delay_max_ms']:.0f} ms; {figures['delay_missing']} missing, {figures['delay_duplicates']} "
              f"received twice (target p99 <= 1 s: {'met' if met else 'NOT met'}); east's own send -> receipt p50 "
              f"{figures['east_ack_p50_ms']:.1f} ms, p99 {figures['east_ack_p99_ms']:.1f} ms; replication cursor "
              f"writes/s: east -> west {figures['cursor_writes_s_east_to_west']:.0f}, west -> east "
              f"{figures['cursor_writes_s_west_to_east']:.0f} (-1: none); CPU us/msg east "
              f"{figures['cpu_us_per_msg_east_delay']:.1f}, west {figures['cpu_us_per_msg_west_delay']:.1f}")
    if "kills" in figures:
        met = (not figures["kill_west_duplicates"] and not figures["kill_west_lost"]
               and figures["kill_west_in_east_order"] and figures["kill_caught_up"])
        print(f"  kills: {figures['kills']} kill -9 of east; {figures['kill_acked']:,} acknowledged, east stores "
              f"{figures['kill_east_stored']:,}, west {figures['kill_west_stored']:,}: {figures['kill_west_duplicates']} "
              f"duplicates, {figures['kill_west_lost']} lost, order {'kept' if figures['kill_west_in_east_order'] else 'NOT kept'}"
              f" (target 0 / 0: {'met' if met else 'NOT met'}); east: {figures['kill_east_lost_acked']} acknowledged "
              f"missing, {figures['kill_east_duplicates']} stored twice; west dropped "
              f"{figures['kill_west_dropped_resends']:.0f} resent SENDs as duplicates; caught up "
              f"{figures['kill_catch_up_s']:.1f} s after the producer's flush")
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) and abs(v) < 100 else f"{k}={v:.0f}"
                   for k, v in figures.items()))


if __name__ == "__main__":
    main()
