"""A cluster of brokers with the official Pulsar client: failover, handoff and throughput.

Each part runs real processes on this machine (``nereus oxia`` + ``nereus broker``
processes over a shared ``file://`` directory, started by ``tests/cluster/harness.py``,
or a ``nereus standalone --brokers N``) and the official ``pulsar-client``:

* ``kill``: produce unavailability after ``kill -9`` of a topic's owner. One client
  process (multi-host ``pulsar://h:p1,h:p2,h:p3`` URL) sends without batching to
  ``--avail-topics`` topics (two per broker) at ``--kill-rate`` msgs/s each; the
  brokers take turns as the victim; per kill, the unavailability is the first ack
  after the kill minus the last ack before it (the largest over the victim's topics).
  The victim is restarted and the ring settles (every topic owned where the ring
  says, every topic acking) before the next kill. Target: <= 3 s whatever the session
  timeout (a killed owner's listener refuses connections: it is seen dead at once).
* ``handoff``: graceful moves. The same kind of client sends to ``--handoff-topics``
  topics at ``--rate`` msgs/s each; the owner of some is drained
  (``POST /admin/v2/brokers/drain``: its topics go to the others), then undrained
  (the ring gives them back): two moves per topic per cycle. Per topic move, the
  unavailability is the largest gap between consecutive acks from the request until
  the topic acks again on its new owner. Default: one topic, so one topic moves at a
  time; ``--handoff-topics 6`` keeps every broker busy with two. Target p99 <= 500 ms.
* ``throughput``: aggregate produce rate of 3 brokers vs 1 broker in the same run
  (same metadata server, same topics, same client load: ``--producers`` processes,
  each with its own client and one topic per broker of the 3-broker ring).
  Target ratio >= 0.8.
* ``standalone``: the same client load against ``nereus standalone --brokers 2``
  vs ``--brokers 1``.

Usage: .venv/bin/python bench/cluster.py [--only kill,handoff,throughput,standalone]
       [--kills 3] [--moves 12] [--session-timeout 10] [--messages 60000] [--producers 4]
Defaults take about 2 minutes; the full run of RESULTS.md (--kills 10 --moves 50
--messages 300000 --rounds 3) about 5 minutes.
The last line is ``key=value`` pairs. ``--keep`` keeps the logs (broker logs at INFO
and the client's log of the kill/handoff parts) in the work directory it prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pulsar

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nereus.broker.cluster.membership import BROKERS  # noqa: E402
from nereus.broker.cluster.ring import HashRing  # noqa: E402
from tests.cluster.harness import Cluster  # noqa: E402

PUBLIC = "persistent://public/default/"
ZONE = "a"


# -- helpers ---------------------------------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), all threads."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spread_topics(names: list[str], per_broker: int, prefix: str) -> list[list[str]]:
    """``per_broker`` topic names owned by each of ``names`` in their ring: result[i][j] is owned by names[j]."""
    ring = HashRing({n: (ZONE, n) for n in names})
    by_owner: dict[str, list[str]] = {n: [] for n in names}
    i = 0
    while any(len(v) < per_broker for v in by_owner.values()):
        topic = f"{PUBLIC}{prefix}-{i}"
        owner = ring.owner(topic)
        if len(by_owner[owner]) < per_broker:
            by_owner[owner].append(topic)
        i += 1
    return [[by_owner[n][k] for n in names] for k in range(per_broker)]


def post(url: str, timeout: float = 120.0) -> None:
    request = urllib.request.Request(url, data=b"", method="POST")
    urllib.request.urlopen(request, timeout=timeout).close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


# -- the availability producer (its own process) -------------------------------------------------------
def _avail_worker(url: str, topics: list[str], rate: float, window: int, log_path: str, conn) -> None:
    """Send to every topic at ``rate`` msgs/s (no batching, at most ``window`` unacked per topic) and
    record each ack's wall time; answer ("acks", since) with the ack times per topic since then."""
    client = pulsar.Client(url, io_threads=1, operation_timeout_seconds=30, connection_timeout_ms=5000,
                           logger=pulsar.FileLogger(pulsar.LoggerLevel.Info, log_path))
    producers = [client.create_producer(t, batching_enabled=False, send_timeout_millis=0,
                                        block_if_queue_full=True, max_pending_messages=window * 2)
                 for t in topics]
    lock = threading.Lock()
    acks: list[list[float]] = [[] for _ in topics]
    errors = [0] * len(topics)
    outstanding = [0] * len(topics)

    def receipt_for(i: int):
        def receipt(result, _msg_id) -> None:
            now = time.time()
            with lock:
                outstanding[i] -= 1
                if result == pulsar.Result.Ok:
                    acks[i].append(now)
                else:
                    errors[i] += 1
        return receipt

    callbacks = [receipt_for(i) for i in range(len(topics))]
    payload = b"x" * 100
    conn.send("ready")
    interval = 1.0 / rate
    due = time.monotonic()
    while True:
        while conn.poll():
            cmd, arg = conn.recv()
            if cmd == "stop":
                for p in producers:
                    p.close()
                client.close()
                conn.send("stopped")
                return
            with lock:  # ("acks", since): the ack times since then; older ones are forgotten
                out = [[t for t in a if t >= arg] for a in acks]
                for i, a in enumerate(acks):
                    acks[i] = [t for t in a if t >= arg - 30]
                conn.send((out, list(errors)))
        for i, producer in enumerate(producers):
            with lock:
                if outstanding[i] >= window:
                    continue
                outstanding[i] += 1
            producer.send_async(payload, callbacks[i])
        due += interval
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        elif delay < -1:
            due = time.monotonic()


class AvailLoad:
    def __init__(self, url: str, topics: list[str], rate: float, window: int, log_path: Path) -> None:
        self.topics = topics
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_avail_worker, args=(url, topics, rate, window, str(log_path), child),
                                daemon=True)
        self.proc.start()
        if not self.conn.poll(120) or self.conn.recv() != "ready":
            raise RuntimeError("the availability producer did not start")

    def acks(self, since: float) -> tuple[dict[str, list[float]], int]:
        self.conn.send(("acks", since))
        out, errors = self.conn.recv()
        return dict(zip(self.topics, out)), sum(errors)

    def all_acking(self, within: float = 1.0) -> bool:
        now = time.time()
        acks, _ = self.acks(now - within)
        return all(acks[t] for t in self.topics)

    def stop(self) -> None:
        try:
            self.conn.send(("stop", None))
            self.conn.poll(30)
        finally:
            self.proc.join(30)
            if self.proc.is_alive():
                self.proc.kill()


def ring_owners(cluster: Cluster, topics: list[str]) -> dict[str, str]:
    names = [n for n, r in cluster.brokers().items() if r["state"] == "active"]
    ring = HashRing({n: (ZONE, n) for n in names})
    return {t: ring.owner(t) for t in topics}


def wait_settled(cluster: Cluster, load: AvailLoad, timeout: float = 600.0) -> dict[str, str]:
    """Every running broker registered, every topic owned where the ring says and acking again."""
    cluster.wait_ring_settled(timeout)

    def settled():
        owners = cluster.owners()
        want = ring_owners(cluster, load.topics)
        return all(owners.get(t) == want[t] for t in load.topics) and load.all_acking() and owners

    owners = cluster.wait_for(settled, timeout, "topics owned where the ring says, and acking")
    return {t: owners[t] for t in load.topics}


def max_gap(times: list[float], start: float) -> float:
    """The largest gap between consecutive ack times, counting from the last ack before ``start``."""
    before = [t for t in times if t < start]
    seq = ([before[-1]] if before else []) + [t for t in times if t >= start]
    return max((b - a for a, b in zip(seq, seq[1:])), default=float("nan"))


# -- part 1: kill -9 of a topic's owner -------------------------------------------------------------------
def run_kill(args, workdir: Path) -> dict[str, float]:
    cluster = Cluster(workdir / "kill", [ZONE] * 3, session_timeout=args.session_timeout).start()
    load = None
    try:
        names = [b.name for b in cluster.brokers_list]
        topics = [t for row in spread_topics(names, args.avail_topics // 3, "kill") for t in row]
        load = AvailLoad(cluster.service_url(), topics, args.kill_rate, args.window, workdir / "pulsar-kill.log")
        results = []
        for round_no in range(args.kills):
            t0 = time.time()
            owners = wait_settled(cluster, load)
            if round_no:
                print(f"  restarted, registered and owning its topics again after {time.time() - t0:.1f} s", flush=True)
            victim = cluster.broker(names[round_no % len(names)])
            victim_topics = [t for t, o in owners.items() if o == victim.name]
            if not victim_topics:  # the ring gives it nothing: kill the owner of the first topic
                victim = cluster.broker(owners[topics[0]])
                victim_topics = [t for t, o in owners.items() if o == victim.name]
            victim.kill()  # SIGKILL and reaped: no ack from it after this
            killed_at = time.time()
            moved_at: dict[str, float] = {}

            def recovered():
                now_owners = cluster.owners()
                for t in victim_topics:
                    if t not in moved_at and now_owners.get(t) not in (None, victim.name):
                        moved_at[t] = time.time()
                acks, _ = load.acks(killed_at - 5)
                return all(any(a > killed_at for a in acks[t]) for t in victim_topics)

            cluster.wait_for(recovered, args.session_timeout * 6 + 60, "the victim's topics acking again",
                             interval=0.1)
            acks, errors = load.acks(killed_at - 5)
            gaps = {}
            for t in victim_topics:
                last = max((a for a in acks[t] if a <= killed_at), default=killed_at)
                first = min(a for a in acks[t] if a > killed_at)
                gaps[t] = first - last
            worst = max(gaps.values())
            results.append(worst)
            owner_after = {t: moved_at.get(t, float("nan")) - killed_at for t in victim_topics}
            print(f"kill {round_no + 1}/{args.kills}: {victim.name} (pid {victim.pids[-1]}) killed at "
                  f"{time.strftime('%H:%M:%S', time.localtime(killed_at))}.{int(killed_at * 1000) % 1000:03d}; "
                  f"{len(victim_topics)} topic(s) ({', '.join(t.rsplit('/', 1)[1] for t in victim_topics)}); unavailable {worst:.2f} s (per topic: "
                  f"{', '.join(f'{g:.2f}' for g in gaps.values())}); new owner record after "
                  f"{', '.join(f'{v:.2f}' for v in owner_after.values())} s; send errors so far {errors}",
                  flush=True)
            victim.launch()
            victim.wait_ready(120)
        wait_settled(cluster, load)
        return {"kill_count": len(results), "kill_unavail_p50_s": statistics.median(results),
                "kill_unavail_max_s": max(results), "kill_unavail_min_s": min(results),
                "session_timeout_s": args.session_timeout}
    finally:
        if load is not None:
            load.stop()
        cluster.close()


# -- part 2: graceful handoff -------------------------------------------------------------------------
def run_handoff(args, workdir: Path) -> dict[str, float]:
    cluster = Cluster(workdir / "handoff", [ZONE] * 3, session_timeout=args.session_timeout).start()
    load = None
    try:
        names = [b.name for b in cluster.brokers_list]
        topics = [t for row in spread_topics(names, -(-args.handoff_topics // 3), "move") for t in row]
        topics = topics[:args.handoff_topics]
        load = AvailLoad(cluster.service_url(), topics, args.rate, args.window, workdir / "pulsar-handoff.log")
        samples: list[tuple[str, float]] = []  # (drain | undrain, seconds)
        cycle = 0
        while len(samples) < args.moves:
            owners = wait_settled(cluster, load)
            victim = cluster.broker(names[cycle % len(names)])
            cycle += 1
            moved = [t for t, o in owners.items() if o == victim.name]
            if not moved:
                continue
            for action in ("drain", "undrain"):
                start = time.time()
                post(f"{victim.http_url}/admin/v2/brokers/{action}")
                done = time.time()

                def moved_and_acking():
                    now_owners = cluster.owners()
                    if action == "drain":
                        if any(now_owners.get(t) in (None, victim.name) for t in moved):
                            return False
                    elif any(now_owners.get(t) != victim.name for t in moved):
                        return False
                    acks, _ = load.acks(start - 5)
                    # acking on the new owner: acks keep coming for 0.3 s after the record moved
                    return all(any(a > time.time() - 0.2 for a in acks[t]) for t in moved) and time.time()

                settled_at = cluster.wait_for(moved_and_acking, 300, f"topics of {victim.name} moved ({action})",
                                              interval=0.05)
                time.sleep(0.3)
                acks, errors = load.acks(start - 5)
                gaps = [max_gap([a for a in acks[t] if a <= settled_at + 0.3], start) for t in moved]
                samples += [(action, g) for g in gaps]
                print(f"{action} {victim.name}: {len(moved)} topic(s) moved; request took {done - start:.2f} s; "
                      f"unavailable {', '.join(f'{g * 1000:.0f}' for g in gaps)} ms; send errors so far {errors}",
                      flush=True)
        values = [g for _, g in samples]
        drains = [g for a, g in samples if a == "drain"]
        undrains = [g for a, g in samples if a == "undrain"]
        return {"handoff_moves": len(values), "handoff_p50_ms": statistics.median(values) * 1000,
                "handoff_p99_ms": percentile(values, 0.99) * 1000, "handoff_max_ms": max(values) * 1000,
                "handoff_drain_p50_ms": statistics.median(drains) * 1000,
                "handoff_undrain_p50_ms": statistics.median(undrains) * 1000,
                "handoff_baseline_gap_ms": 1000 / args.rate}
    finally:
        if load is not None:
            load.stop()
        cluster.close()


# -- parts 3 and 4: throughput ----------------------------------------------------------------------------
def _produce_worker(url: str, topics: list[str], payload: bytes, count: int, barrier, results) -> None:
    """One producer process (its own client, one producer per topic): send ``count`` messages round robin."""
    client = pulsar.Client(url, io_threads=1, operation_timeout_seconds=60,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producers = [client.create_producer(t, batching_enabled=True, batching_max_messages=1000,
                                        batching_max_allowed_size_in_bytes=128 * 1024,
                                        batching_max_publish_delay_ms=5, max_pending_messages=20000,
                                        block_if_queue_full=True) for t in topics]
    for producer in producers:  # warm up: topics loaded, writers acquired, connections open
        for _ in range(100):
            producer.send_async(payload, None)
        producer.flush()
    errors = []
    done = threading.Event()
    remaining = [count]
    lock = threading.Lock()

    def receipt(result, _msg_id) -> None:
        if result != pulsar.Result.Ok:
            errors.append(result)
        with lock:
            remaining[0] -= 1
            if remaining[0] == 0:
                done.set()

    barrier.wait(120)
    start = time.time()
    n = len(producers)
    for i in range(count):
        producers[i % n].send_async(payload, receipt)
    for producer in producers:
        producer.flush()
    done.wait(300)
    end = time.time()
    for producer in producers:
        producer.close()
    client.close()
    results.put((start, end, count - remaining[0] - len(errors), len(errors)))


def produce(url: str, topic_sets: list[list[str]], payload: bytes, count: int) -> float:
    """Messages per second acknowledged over the wall time from the first send to the last receipt;
    one process per topic set, ``count`` messages in all."""
    ctx = multiprocessing.get_context("spawn")
    processes = len(topic_sets)
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    share = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
    workers = [ctx.Process(target=_produce_worker, args=(url, topics, payload, n, barrier, results))
               for topics, n in zip(topic_sets, share)]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=600) for _ in workers]
    finally:
        for worker in workers:
            worker.join(60)
    acked = sum(r[2] for r in reports)
    failed = sum(r[3] for r in reports)
    if failed or acked != count:
        raise RuntimeError(f"{failed} send errors, {count - acked - failed} receipts missing")
    return acked / (max(r[1] for r in reports) - min(r[0] for r in reports))


def _measure(url: str, pids: list[int], topic_sets: list[list[str]], args, label: str) -> tuple[float, float]:
    before = sum(cpu_seconds(p) for p in pids)
    rate = produce(url, topic_sets, b"x" * args.size, args.messages)
    cpu_us = (sum(cpu_seconds(p) for p in pids) - before) / args.messages * 1e6
    print(f"{label}: {rate:,.0f} msgs/s ({len(topic_sets)} producer processes, "
          f"{sum(len(s) for s in topic_sets)} topics); server CPU {cpu_us:.2f} us/msg", flush=True)
    return rate, cpu_us


def run_throughput(args, workdir: Path) -> dict[str, float]:
    names = [f"b{i + 1}" for i in range(3)]  # the harness' broker names
    figures: dict[str, float] = {}
    rates: dict[int, list[float]] = {1: [], 3: []}
    for rnd in range(args.rounds):
        topic_sets = spread_topics(names, args.producers, f"tput{rnd}")  # one topic per broker per process
        for brokers in (1, 3):
            cluster = Cluster(workdir / f"tput-{rnd}-{brokers}", [ZONE] * brokers,
                              session_timeout=args.session_timeout).start()
            try:
                pids = [cluster.oxia.pid, *(b.pid for b in cluster.brokers_list)]
                rate, cpu_us = _measure(cluster.service_url(), pids, topic_sets, args,
                                        f"cluster of {brokers} broker(s), round {rnd + 1}")
                rates[brokers].append(rate)
                figures[f"tput_{brokers}b_cpu_us_per_msg"] = cpu_us
                if brokers == 3:
                    owners = cluster.owners()
                    spread = {n: sum(1 for s in topic_sets for t in s if owners.get(t) == n) for n in names}
                    print(f"  topics per broker: {spread}")
            finally:
                cluster.close()
    figures["tput_1b_msgs_s"] = statistics.median(rates[1])
    figures["tput_3b_msgs_s"] = statistics.median(rates[3])
    figures["tput_ratio_3b_1b"] = figures["tput_3b_msgs_s"] / figures["tput_1b_msgs_s"]
    return figures


def _free_port_run(width: int, taken: set[int]) -> int:
    """A port p with p .. p + width - 1 all free (and not handed out already)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + width > 65535 or any(p in taken for p in range(base, base + width)):
            continue
        ok = True
        for p in range(base + 1, base + width):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            taken.update(range(base, base + width))
            return base


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def _active_brokers(oxia_port: int) -> list[str]:
    """The names of the brokers registered active in the metadata plane at ``oxia_port``."""
    from nereus.meta import connect

    async def names() -> list[str]:
        meta = connect(f"oxia://127.0.0.1:{oxia_port}")
        try:
            return [value["address"]["name"] async for rec in meta.range_scan(BROKERS, BROKERS + "\uffff")
                    if (value := json.loads(rec.value))["state"] == "active"]
        finally:
            await meta.close()
    return asyncio.run(names())


def start_standalone(workdir: Path, brokers: int,
                     extra_args: tuple[str, ...] = ()) -> tuple[subprocess.Popen, dict[str, int], list[str]]:
    taken: set[int] = set()
    ports = {n: _free_port_run(brokers, taken) for n in ("http", "pulsar", "kafka")}
    ports["oxia"] = _free_port_run(1, taken)
    args = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "standalone", "--data-dir",
            str(workdir / "nereus"), "--brokers", str(brokers), "--compaction-interval", "0", *extra_args]
    for name, port in ports.items():
        args += [f"--{name}-port", str(port)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(workdir / "nereus.log", "ab"), cwd=ROOT)
    deadline = time.monotonic() + 90
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"nereus standalone exited with {proc.returncode}; see {workdir / 'nereus.log'}")
        try:
            names = _active_brokers(ports["oxia"])
            if len(names) == brokers:
                break
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"nereus standalone --brokers {brokers}: not all brokers registered")
        time.sleep(0.5)
    return proc, ports, names


def run_standalone(args, workdir: Path) -> dict[str, float]:
    rates: dict[int, list[float]] = {1: [], 2: []}
    figures: dict[str, float] = {}
    for rnd in range(args.rounds):
        for brokers in (1, 2):
            root = workdir / f"standalone-{rnd}-{brokers}"
            root.mkdir(parents=True)
            proc, ports, names = start_standalone(root, brokers)
            try:
                # Two topics per process (one per broker of the 2-broker ring: names carry the ports).
                per_process = spread_topics(sorted(names) if brokers == 2 else ["x", "y"], args.producers,
                                            f"sa{rnd}-{brokers}")
                url = "pulsar://" + ",".join(f"127.0.0.1:{ports['pulsar'] + i}" for i in range(brokers))
                pids = [proc.pid, *_children(proc.pid)]
                rate, cpu_us = _measure(url, pids, per_process, args,
                                        f"standalone --brokers {brokers}, round {rnd + 1}")
                rates[brokers].append(rate)
                figures[f"standalone_{brokers}b_cpu_us_per_msg"] = cpu_us
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(90)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    figures["standalone_1b_msgs_s"] = statistics.median(rates[1])
    figures["standalone_2b_msgs_s"] = statistics.median(rates[2])
    figures["standalone_ratio_2b_1b"] = figures["standalone_2b_msgs_s"] / figures["standalone_1b_msgs_s"]
    return figures


PARTS = {"kill": run_kill, "handoff": run_handoff, "throughput": run_throughput, "standalone": run_standalone}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts: {','.join(PARTS)}")
    parser.add_argument("--session-timeout", type=float, default=10.0, help="brokers' --session-timeout (s)")
    parser.add_argument("--kills", type=int, default=3, help="kill -9 rounds (the full run uses 10)")
    parser.add_argument("--moves", type=int, default=12, help="topic moves to measure (the full run uses 50)")
    parser.add_argument("--avail-topics", type=int, default=6, help="topics of the kill producer (spread evenly)")
    parser.add_argument("--handoff-topics", type=int, default=1,
                        help="topics of the handoff producer (1: one topic moves at a time and the brokers carry "
                             "no other load; more: spread evenly, every broker busy)")
    parser.add_argument("--rate", type=float, default=100.0, help="msgs/s per topic of the handoff producer")
    parser.add_argument("--kill-rate", type=float, default=20.0, help="msgs/s per topic of the kill producer")
    parser.add_argument("--window", type=int, default=100, help="unacked messages per topic at most (kill/handoff)")
    parser.add_argument("--messages", type=int, default=60_000, help="messages per throughput case")
    parser.add_argument("--size", type=int, default=1024, help="message size of the throughput cases")
    parser.add_argument("--producers", type=int, default=4, help="producer processes per throughput case")
    parser.add_argument("--rounds", type=int, default=1, help="throughput rounds (medians are reported)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {list(PARTS)}")

    workdir = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    print(f"work directory: {workdir}; load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    figures: dict[str, float] = {}
    started = time.monotonic()
    try:
        for part in parts:
            t0 = time.monotonic()
            figures.update(PARTS[part](args, workdir))
            print(f"-- {part} done in {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    figures["total_s"] = time.monotonic() - started

    print("\nsummary")
    if "kill_count" in figures:
        target = 3.0
        print(f"  kill -9 of the owner ({figures['kill_count']:.0f} kills, session timeout {args.session_timeout:g} s): "
              f"unavailable p50 {figures['kill_unavail_p50_s']:.2f} s, max {figures['kill_unavail_max_s']:.2f} s "
              f"(target <= {target:g} s: {'met' if figures['kill_unavail_max_s'] <= target else 'MISSED'})")
    if "handoff_moves" in figures:
        print(f"  graceful handoff ({figures['handoff_moves']:.0f} topic moves): p50 {figures['handoff_p50_ms']:.0f} ms, "
              f"p99 {figures['handoff_p99_ms']:.0f} ms, max {figures['handoff_max_ms']:.0f} ms "
              f"(target p99 <= 500 ms: {'met' if figures['handoff_p99_ms'] <= 500 else 'MISSED'})")
    if "tput_ratio_3b_1b" in figures:
        print(f"  produce 3 brokers / 1 broker: {figures['tput_3b_msgs_s']:,.0f} / {figures['tput_1b_msgs_s']:,.0f} "
              f"msgs/s = {figures['tput_ratio_3b_1b']:.2f} "
              f"(target >= 0.8: {'met' if figures['tput_ratio_3b_1b'] >= 0.8 else 'MISSED'})")
    if "standalone_ratio_2b_1b" in figures:
        print(f"  standalone --brokers 2 / --brokers 1: {figures['standalone_2b_msgs_s']:,.0f} / "
              f"{figures['standalone_1b_msgs_s']:,.0f} msgs/s = {figures['standalone_ratio_2b_1b']:.2f}")
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) and v < 100 else f"{k}={v:.0f}"
                   for k, v in figures.items()))


if __name__ == "__main__":
    main()
