"""Kill -9 soak: a standalone killed and restarted under Pulsar and Kafka produce + consume load.

One standalone on fixed free ports and one data directory is started, left under
load for a random 1-3 s, killed with SIGKILL and started again, ``--cycles`` times.
The clients live across all of it, as applications would, and retry through every
outage: a Pulsar producer with a fixed name (deduplication is on by default) and
no send timeout, an idempotent confluent-kafka producer, a Pulsar consumer on a
durable subscription and a Kafka consumer group, both acknowledging what they get.
Each message carries a unique number.

After the last cycle the standalone is started once more, the producers are
drained, and each topic is read whole from its start (a Pulsar reader, a Kafka
consumer of a new group). Counted per protocol:

* lost: acknowledged to the producer, absent from the topic (target 0);
* duplicates: numbers stored more than once although the producer deduplicates (target 0);
* undelivered: acknowledged, never received by the subscription / group consumer (target 0);
* redelivered: received by those consumers more than once (allowed: at-least-once).

Usage: .venv/bin/python bench/soak.py [--cycles 100] [--min-up 1] [--max-up 3]
The last line is ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pulsar
from confluent_kafka import Consumer, Producer, TopicPartition

from _procs import free_port, wait_port  # bench/ is on sys.path

PULSAR_TOPIC, KAFKA_TOPIC = "soak-pulsar", "soak-kafka"  # one each: a Pulsar and a Kafka topic are one stream


class Standalone:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ports = {n: free_port() for n in ("http", "pulsar", "kafka", "oxia")}
        self.proc: subprocess.Popen | None = None

    def start(self) -> float:
        """Start and wait for the listeners; the seconds it took."""
        began = time.monotonic()
        args = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "standalone", "--data-dir",
                str(self.workdir / "data"), "--compaction-interval", "0", "--session-timeout", "2"]
        for name, port in self.ports.items():
            args += [f"--{name}-port", str(port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(self.workdir / "nereus.log", "ab"))
        for name in ("http", "pulsar", "kafka"):
            wait_port(self.ports[name], self.proc, timeout=120)
        return time.monotonic() - began

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> int:
        self.proc.terminate()
        return self.proc.wait(120)


class Load:
    """The long-lived clients and what they saw."""

    def __init__(self, node: Standalone) -> None:
        self.stop = threading.Event()  # the producers
        self.stop_consumers = threading.Event()
        self.lock = threading.Lock()
        self.acked = {"pulsar": set(), "kafka": set()}
        self.errors = collections.Counter()
        self.received = {"pulsar": collections.Counter(), "kafka": collections.Counter()}
        self.node = node
        self.stuck = ""
        self.sent = {"pulsar": 0, "kafka": 0}
        url = f"pulsar://127.0.0.1:{node.ports['pulsar']}"
        self.bootstrap = f"127.0.0.1:{node.ports['kafka']}"
        self.client = pulsar.Client(url, operation_timeout_seconds=120, io_threads=2,
                                    logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(node.workdir / "client.log")))
        self.producer = self.client.create_producer(
            PULSAR_TOPIC, producer_name="soak-producer", send_timeout_millis=0, batching_enabled=True,
            batching_max_publish_delay_ms=5, max_pending_messages=500, block_if_queue_full=True)
        self.consumer = self.client.subscribe(PULSAR_TOPIC, "soak-sub", consumer_type=pulsar.ConsumerType.Shared)
        self.kproducer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                                   "message.timeout.ms": 900_000, "linger.ms": 5, "reconnect.backoff.max.ms": 1000,
                                   "queue.buffering.max.messages": 2000, "log_level": 0})
        self.kconsumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "soak-group",
                                   "auto.offset.reset": "earliest", "reconnect.backoff.max.ms": 1000,
                                   "log_level": 0})
        self.kconsumer.subscribe([KAFKA_TOPIC])
        self.threads = [threading.Thread(target=t, daemon=True) for t in
                        (self._pulsar_produce, self._pulsar_consume, self._kafka_produce, self._kafka_consume)]
        for thread in self.threads:
            thread.start()

    def _pulsar_produce(self) -> None:
        n = 0
        while not self.stop.is_set():
            def receipt(result, _msg_id, n=n) -> None:
                with self.lock:
                    if result == pulsar.Result.Ok:
                        self.acked["pulsar"].add(n)
                    else:
                        self.errors[f"pulsar {result}"] += 1
            try:
                self.producer.send_async(str(n).encode(), receipt)
            except Exception as exc:  # noqa: BLE001 - counted, the load goes on
                self.errors[f"pulsar send {type(exc).__name__}"] += 1
                time.sleep(0.1)
                continue
            n += 1
            self.sent["pulsar"] = n

    def _pulsar_consume(self) -> None:
        while not self.stop_consumers.is_set():
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            except Exception:  # noqa: BLE001 - reconnecting
                time.sleep(0.1)
                continue
            with self.lock:
                self.received["pulsar"][int(msg.data())] += 1
            self.consumer.acknowledge(msg)

    def _kafka_produce(self) -> None:
        n = 0
        while not self.stop.is_set():
            def delivered(err, _msg, n=n) -> None:
                with self.lock:
                    if err is None:
                        self.acked["kafka"].add(n)
                    else:
                        self.errors[f"kafka {err.name()}"] += 1
            try:
                self.kproducer.produce(KAFKA_TOPIC, str(n).encode(), on_delivery=delivered)
            except BufferError:
                self.kproducer.poll(0.05)
                continue
            n += 1
            self.sent["kafka"] = n
            self.kproducer.poll(0)

    def _kafka_consume(self) -> None:
        while not self.stop_consumers.is_set():
            for msg in self.kconsumer.consume(500, 0.2):
                if msg.error() is None:
                    with self.lock:
                        self.received["kafka"][int(msg.value())] += 1

    def finish(self, timeout: float = 300) -> None:
        """Stop producing, wait for every acknowledgement and for the consumers to catch up."""
        self.stop.set()
        for thread in (self.threads[0], self.threads[2]):
            thread.join(60)
        self.producer.flush()
        self.kproducer.flush(timeout)
        deadline = time.monotonic() + timeout
        progress, progressed_at = None, time.monotonic()
        while time.monotonic() < deadline:
            with self.lock:
                behind = [p for p in ("pulsar", "kafka") if self.acked[p] - set(self.received[p])]
                seen = (len(self.received["pulsar"]), len(self.received["kafka"]))
            if not behind:
                break
            if seen != progress:
                progress, progressed_at = seen, time.monotonic()
            elif time.monotonic() - progressed_at > 60:
                break  # nothing new for a minute: report what is missing
            time.sleep(0.5)
        if behind:
            self.stuck = self._subscription_state()
        self.stop_consumers.set()
        for thread in (self.threads[1], self.threads[3]):
            thread.join(60)
        self.kconsumer.close()
        self.client.close()

    def _subscription_state(self) -> str:
        """The broker's view of the Pulsar subscription (permits, backlog, cursor), for a report."""
        base = f"http://127.0.0.1:{self.node.ports['http']}/admin/v2/persistent/public/default/{PULSAR_TOPIC}"
        try:
            stats = json.load(urllib.request.urlopen(base + "/stats", timeout=30))["subscriptions"]["soak-sub"]
            cursor = json.load(urllib.request.urlopen(base + "/internalStats", timeout=30))["cursors"]["soak-sub"]
        except Exception as exc:  # noqa: BLE001 - a report only
            return f"subscription state unavailable: {exc}"
        consumers = [{k: c[k] for k in ("availablePermits", "unackedMessages")} for c in stats["consumers"]]
        return (f"backlog {stats['msgBacklog']}, consumers {consumers}, mark-delete {cursor['markDeletePosition']}, "
                f"read position {cursor['readPosition']}")


def stored_pulsar(node: Standalone) -> collections.Counter:
    client = pulsar.Client(f"pulsar://127.0.0.1:{node.ports['pulsar']}", operation_timeout_seconds=60,
                           logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(node.workdir / "client.log")))
    reader = client.create_reader(PULSAR_TOPIC, pulsar.MessageId.earliest)
    found = collections.Counter()
    while reader.has_message_available():
        found[int(reader.read_next(timeout_millis=30000).data())] += 1
    client.close()
    return found


def stored_kafka(node: Standalone) -> collections.Counter:
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{node.ports['kafka']}", "group.id": f"check-{os.getpid()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "log_level": 0})
    low, high = consumer.get_watermark_offsets(TopicPartition(KAFKA_TOPIC, 0), timeout=30)
    consumer.assign([TopicPartition(KAFKA_TOPIC, 0, low)])
    found = collections.Counter()
    position = low
    deadline = time.monotonic() + 300
    while position < high and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error() is None:
                found[int(msg.value())] += 1
                position = msg.offset() + 1
    consumer.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--min-up", type=float, default=1.0, help="least seconds under load before a kill")
    parser.add_argument("--max-up", type=float, default=3.0, help="most seconds under load before a kill")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="nereus-soak-"))
    node = Standalone(workdir)
    began = time.monotonic()
    startups = [node.start()]
    load = Load(node)
    for cycle in range(1, args.cycles + 1):
        time.sleep(rng.uniform(args.min_up, args.max_up))
        node.kill()
        startups.append(node.start())
        if cycle % 10 == 0 or cycle == args.cycles:
            print(f"cycle {cycle}: acked pulsar={len(load.acked['pulsar'])} kafka={len(load.acked['kafka'])}, "
                  f"last start {startups[-1]:.1f} s, {time.monotonic() - began:.0f} s so far", flush=True)
    time.sleep(args.min_up)
    load.finish()
    stored = {"pulsar": stored_pulsar(node), "kafka": stored_kafka(node)}
    code = node.stop()
    summary = {"cycles": args.cycles, "seconds": round(time.monotonic() - began),
               "median_start_s": round(sorted(startups)[len(startups) // 2], 1), "clean_stop_code": code}
    for protocol in ("pulsar", "kafka"):
        acked, found, received = load.acked[protocol], stored[protocol], load.received[protocol]
        summary.update({
            f"{protocol}_sent": load.sent[protocol], f"{protocol}_acked": len(acked),
            f"{protocol}_lost": len(acked - set(found)),
            f"{protocol}_duplicates": sum(1 for c in found.values() if c > 1),
            f"{protocol}_stored_unacked": len(set(found) - acked),
            f"{protocol}_undelivered": len(acked - set(received)),
            f"{protocol}_redelivered": sum(c - 1 for c in received.values() if c > 1),
        })
    summary["errors"] = sum(load.errors.values())
    print(f"\nsoak: {args.cycles} kill -9 cycles in {summary['seconds']} s")
    for protocol in ("pulsar", "kafka"):
        print(f"  {protocol}: acked {summary[f'{protocol}_acked']:,}, lost {summary[f'{protocol}_lost']}, "
              f"duplicates {summary[f'{protocol}_duplicates']}, undelivered {summary[f'{protocol}_undelivered']}, "
              f"redelivered {summary[f'{protocol}_redelivered']} (at-least-once), "
              f"stored but never acknowledged {summary[f'{protocol}_stored_unacked']}")
    if load.errors:
        print(f"  client errors: {dict(load.errors)}")
    if load.stuck:
        print(f"  pulsar subscription when the consumer stopped getting messages: {load.stuck}")
    print(" ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
