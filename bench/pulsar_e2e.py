"""Pulsar end to end with the official client: nereus standalone vs. Redis Streams (reference).

Measures against a nereus standalone started here on free ports (same machine):

* producer throughput with batching, 1 KiB and 100-byte messages, on 1 topic and on
  a topic with 8 partitions (created through the admin REST API): ``--producers``
  processes (default 4), each with its own client and producer, send concurrently;
  the figure is the messages acknowledged over the common wall time (first send to
  last receipt), so one Python client's per-message cost does not cap it;
* consumer throughput reading back the 1 KiB single-topic messages (acks cumulative);
* publish latency p50/p99 at a steady 10,000 msgs/s (1 KiB, 1 topic, batching 1 ms).

Reference: ``redis-server`` (Debian package) started here on a free port with
``--appendonly yes --appendfsync everysec``, loaded with
``redis-benchmark -P 16 ... XADD`` with the same payload sizes. Redis syncs its log
once a second; nereus acknowledges a message only after its WAL object is written
and the index committed. Without ``redis-server`` only nereus is measured.

Usage: .venv/bin/python bench/pulsar_e2e.py [--messages 100000] [--latency-seconds 10] [--producers 4]
The last line is ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pulsar

from _procs import free_port, start_nereus, wait_port  # bench/ is on sys.path

SIZES = {"1k": 1024, "100b": 100}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), all threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create_partitioned(http_port: int, topic: str, partitions: int) -> None:
    path = topic.replace("://", "/", 1)
    request = urllib.request.Request(f"http://127.0.0.1:{http_port}/admin/v2/{path}/partitions",
                                     data=json.dumps(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=10).close()


def _produce_worker(url: str, topic: str, payload: bytes, count: int, barrier, results) -> None:
    """One producer process (its own client): send ``count`` messages, report (start, end, acked, errors)."""
    client = pulsar.Client(url, io_threads=1, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_allowed_size_in_bytes=128 * 1024,
                                      batching_max_publish_delay_ms=5, max_pending_messages=20000,
                                      block_if_queue_full=True)
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

    barrier.wait(60)
    start = time.time()
    for _ in range(count):
        producer.send_async(payload, receipt)
    producer.flush()
    done.wait(120)
    end = time.time()
    producer.close()
    client.close()
    results.put((start, end, count - remaining[0] - len(errors), len(errors)))


def produce(url: str, topic: str, payload: bytes, count: int, processes: int) -> float:
    """Messages per second acknowledged by the broker, over the wall time from the first
    producer's first send to the last producer's last receipt; ``processes`` producer
    processes, each with its own client, send ``count / processes`` messages concurrently."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    share = [count // processes + (1 if i < count % processes else 0) for i in range(processes)]
    workers = [ctx.Process(target=_produce_worker, args=(url, topic, payload, n, barrier, results))
               for n in share]
    for worker in workers:
        worker.start()
    try:
        reports = [results.get(timeout=300) for _ in workers]
    finally:
        for worker in workers:
            worker.join(60)
    acked = sum(r[2] for r in reports)
    failed = sum(r[3] for r in reports)
    if failed or acked != count:
        raise RuntimeError(f"{failed} send errors, {count - acked - failed} receipts missing on {topic}")
    return acked / (max(r[1] for r in reports) - min(r[0] for r in reports))


def consume(client: pulsar.Client, topic: str, count: int) -> float:
    consumer = client.subscribe(topic, "bench", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=10000)
    start = time.perf_counter()
    last = None
    for i in range(count):
        last = consumer.receive(timeout_millis=30000)
        if i % 1000 == 999:
            consumer.acknowledge_cumulative(last)
    consumer.acknowledge_cumulative(last)
    elapsed = time.perf_counter() - start
    consumer.close()
    return count / elapsed


def latency(client: pulsar.Client, topic: str, payload: bytes, rate: int, seconds: float) -> dict:
    """Send at a steady ``rate``; p50/p99 of send -> receipt in ms, and the rate achieved."""
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                      max_pending_messages=50000, block_if_queue_full=True)
    total = int(rate * seconds)
    sent = [0.0] * total
    acked = [0.0] * total
    failures = []

    def receipt_for(i: int):
        def receipt(result, _msg_id) -> None:
            acked[i] = time.perf_counter()
            if result != pulsar.Result.Ok:
                failures.append(result)
        return receipt

    start = time.perf_counter()
    i = 0
    while i < total:
        due = min(total, int((time.perf_counter() - start) * rate) + 1)
        while i < due:
            sent[i] = time.perf_counter()
            producer.send_async(payload, receipt_for(i))
            i += 1
        time.sleep(0.0005)
    producer.flush()
    elapsed = time.perf_counter() - start
    deadline = time.monotonic() + 30
    while not all(acked) and time.monotonic() < deadline:
        time.sleep(0.05)
    producer.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed during the latency run")
    lat = sorted((a - s) * 1000 for s, a in zip(sent, acked) if a)
    return {"p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)], "rate": total / elapsed}


def redis_xadd(workdir: Path, count: int) -> dict[str, float] | None:
    server, bench = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if server is None or bench is None:
        print("reference: redis-server/redis-benchmark not found; install them with "
              "`apt-get update && apt-get install -y redis-server redis-tools` to compare. Measuring nereus only.")
        return None
    port = free_port()
    data = workdir / "redis"
    data.mkdir()
    proc = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                             "--appendonly", "yes", "--appendfsync", "everysec", "--save", ""],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        results = {}
        for label, size in SIZES.items():
            out = subprocess.run([bench, "-h", "127.0.0.1", "-p", str(port), "-P", "16", "-n", str(count),
                                  "--csv", "XADD", f"bench-{label}", "*", "v", "x" * size],
                                 capture_output=True, text=True, check=True, timeout=600).stdout
            row = [line for line in out.splitlines() if line.startswith('"XADD')][-1]
            results[label] = float(row.split(",")[1].strip('"'))
        return results
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages per throughput case")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=10_000, help="steady rate of the latency run (msgs/s)")
    parser.add_argument("--producers", type=int, default=4,
                        help="producer processes per throughput case, each with its own client")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="pulsar-e2e-"))
    proc, ports = start_nereus(workdir)
    figures: dict[str, float] = {}
    url = f"pulsar://127.0.0.1:{ports['pulsar']}"
    try:
        client = pulsar.Client(url, io_threads=1, operation_timeout_seconds=30,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        for label, size in SIZES.items():
            payload = b"x" * size
            parted = f"persistent://public/default/bench-{label}-p8"
            create_partitioned(ports["http"], parted, 8)
            for case, topic in (("1p", f"persistent://public/default/bench-{label}"), ("8p", parted)):
                before = cpu_seconds(proc.pid)
                rate = figures[f"produce_{label}_{case}_msgs_s"] = produce(url, topic, payload, args.messages,
                                                                          args.producers)
                # Broker CPU per message (includes producer connect/lookup, a few ms): what one
                # broker core could sustain if the clients were free.
                per_msg = (cpu_seconds(proc.pid) - before) / args.messages
                figures[f"broker_cpu_us_per_msg_{label}_{case}"] = per_msg * 1e6
                print(f"nereus produce {label} {'x1 topic' if case == '1p' else 'x8 partitions'}: {rate:,.0f} msgs/s "
                      f"({args.producers} producer processes); broker CPU {per_msg * 1e6:.2f} us/msg "
                      f"(~{1 / per_msg:,.0f} msgs/s per broker core)")
        figures["consume_1k_msgs_s"] = consume(client, "persistent://public/default/bench-1k", args.messages)
        print(f"nereus consume 1k: {figures['consume_1k_msgs_s']:,.0f} msgs/s")
        lat = latency(client, "persistent://public/default/bench-latency", b"x" * 1024, args.rate,
                      args.latency_seconds)
        figures.update(latency_p50_ms=lat["p50"], latency_p99_ms=lat["p99"], latency_rate_msgs_s=lat["rate"])
        print(f"nereus publish latency at {lat['rate']:,.0f} msgs/s: p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms")
        client.close()
    finally:
        proc.terminate()
        proc.wait(60)

    redis = redis_xadd(workdir, args.messages)
    if redis is not None:
        for label, rps in redis.items():
            figures[f"redis_xadd_{label}_rps"] = rps
            figures[f"ratio_{label}"] = figures[f"produce_{label}_1p_msgs_s"] / rps
            print(f"redis XADD {label} (-P 16): {rps:,.0f} msgs/s; nereus/redis (1 topic) = "
                  f"{figures[f'ratio_{label}']:.2f}")
    shutil.rmtree(workdir, ignore_errors=True)
    print(" ".join(f"{k}={v:.3f}" if isinstance(v, float) and v < 100 else f"{k}={v:.0f}"
                   for k, v in figures.items()))


if __name__ == "__main__":
    main()
