"""Throughput and p99 over TLS and over token authentication vs. plaintext, Pulsar and Kafka, in one run.

One standalone (started here on free ports) serves every variant at once:
Pulsar on ``pulsar://`` and ``pulsar+ssl://``, with and without a token
(``authenticationEnabled`` with an ``anonymousUserRole``, so a client without
credentials is let in as that role); Kafka on PLAINTEXT, SSL, SASL_PLAINTEXT and
SASL_SSL listeners (SASL/PLAIN with a ``token:<jwt>`` password). The certificate is
self-signed, made with ``openssl`` here.

For each variant: one producer (official client, batching) sends ``--messages``
1 KiB messages to a fresh topic as fast as acknowledgements allow (throughput:
messages acknowledged over the wall time; p99: send-to-acknowledgement latency
of each message), then one consumer reads them back (messages over the time to
the last). Variants run interleaved, ``--rounds`` times each, and the median round
is reported with its ratio to the plaintext variant of the same protocol (target
>= 0.8). Each phase's CPU time (broker process plus this process, where the client
runs) is reported too: on cores shared with other jobs the wall-time ratios
scatter, the CPU a message costs much less so. ``--tls-offload-processes N`` gives
the standalone ``tlsOffloadProcesses=N`` (TLS ended in N worker processes); the
broker's CPU then includes its workers'. ``--pin 0:1`` runs the broker's threads on
CPU 0 and this process (the clients) and the TLS workers on CPU 1, so the broker has a
core of its own.

Usage: .venv/bin/python bench/tls_overhead.py [--messages 50000] [--rounds 3] [--tls-offload-processes N]
[--pin BROKER_CPUS:OTHER_CPUS] [--variants kafka_plain,kafka_ssl,...]
The last line is ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import jwt
import pulsar
from confluent_kafka import Consumer, Producer

from _procs import cpu_seconds, free_port, start_nereus, wait_port  # bench/ is on sys.path

SIZE = 1024
SECRET = os.urandom(32)
PRODUCER_EXTRA: dict = {}  # --kafka-producer key=value,... on top of the bench's settings
BROKER_PID: list[int] = []  # the standalone's, once started, then its TLS offload workers'


def offload_workers(pid: int) -> list[int]:
    """The TLS offload worker processes of the standalone ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == pid and b"nereus.tls_offload.worker" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _cpus(text: str) -> set[int]:
    return {int(cpu) for cpu in text.split(",")}


def pin(broker_pid: int, spec: str) -> None:
    """``BROKER_CPUS:OTHER_CPUS`` (comma-separated CPU numbers): the broker's threads on the first, this
    process and the broker's TLS workers on the others."""
    broker, other = (_cpus(part) for part in spec.split(":"))
    os.sched_setaffinity(0, other)
    for tid in os.listdir(f"/proc/{broker_pid}/task"):
        os.sched_setaffinity(int(tid), broker)
    for worker in BROKER_PID[1:]:
        for tid in os.listdir(f"/proc/{worker}/task"):
            os.sched_setaffinity(int(tid), other)


def cpu_now() -> tuple[float, float, float]:
    """(broker and its TLS workers, client, the TLS workers alone) CPU seconds so far."""
    workers = sum(cpu_seconds(pid) for pid in BROKER_PID[1:])
    return cpu_seconds(BROKER_PID[0]) + workers, cpu_seconds(), workers


def cpu_since(start: tuple[float, float, float]) -> tuple[float, float, float]:
    return tuple(now - then for now, then in zip(cpu_now(), start))


def make_cert(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "server.pem", directory / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


def token(subject: str = "bench") -> str:
    return jwt.encode({"sub": subject, "exp": int(time.time()) + 86400}, SECRET, algorithm="HS256")


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


# -- pulsar -----------------------------------------------------------------------------------
def pulsar_round(url: str, count: int, *, auth=None, ca: Path | None = None) -> dict:
    """produce msgs/s, produce p99 ms, consume msgs/s, and each phase's (broker, client) CPU seconds."""
    options = dict(io_threads=1, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    if auth is not None:
        options["authentication"] = auth
    if ca is not None:
        options.update(tls_trust_certs_file_path=str(ca), tls_validate_hostname=True)
    client = pulsar.Client(url, **options)
    topic = f"persistent://public/default/tls-{uuid.uuid4().hex[:8]}"
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=1000,
                                      batching_max_allowed_size_in_bytes=128 * 1024, batching_max_publish_delay_ms=5,
                                      max_pending_messages=20000, block_if_queue_full=True)
    payload = os.urandom(SIZE)
    latencies: list[float] = []
    done = threading.Event()
    remaining = [count]
    lock = threading.Lock()

    def receipt(sent_at: float):
        def callback(result, _msg_id) -> None:
            now = time.perf_counter()
            with lock:
                latencies.append(now - sent_at)
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()
        return callback

    cpu = cpu_now()
    start = time.perf_counter()
    for _ in range(count):
        producer.send_async(payload, receipt(time.perf_counter()))
    producer.flush()
    done.wait(300)
    produce = count / (time.perf_counter() - start)
    produce_cpu = cpu_since(cpu)
    # Subscribed only now: the consumer reads stored messages, not ones pushed while producing.
    consumer = client.subscribe(topic, "bench", receiver_queue_size=5000,
                                initial_position=pulsar.InitialPosition.Earliest)
    cpu = cpu_now()
    start = time.perf_counter()
    last = None
    for _ in range(count):
        last = consumer.receive(timeout_millis=60000)
    consume = count / (time.perf_counter() - start)
    consume_cpu = cpu_since(cpu)
    consumer.acknowledge_cumulative(last)
    client.close()
    return dict(produce=produce, p99=_percentile(latencies, 0.99) * 1000, consume=consume,
                produce_cpu=produce_cpu, consume_cpu=consume_cpu)


# -- kafka ------------------------------------------------------------------------------------
def kafka_round(conf: dict, count: int) -> dict:
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    producer = Producer({**conf, "linger.ms": 5, "batch.size": 131072, "queue.buffering.max.messages": 200000,
                         "acks": "all", **PRODUCER_EXTRA})
    payload = os.urandom(SIZE)
    latencies: list[float] = []

    def delivered(sent_at: float):
        return lambda err, _msg: latencies.append(time.perf_counter() - sent_at)

    producer.produce(topic, b"warm-up")  # creates the topic before the clock starts
    producer.flush(60)
    latencies.clear()
    cpu = cpu_now()
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, payload, on_delivery=delivered(time.perf_counter()))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    producer.flush(300)
    produce = count / (time.perf_counter() - start)
    produce_cpu = cpu_since(cpu)
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "fetch.max.bytes": 8 << 20})
    consumer.subscribe([topic])
    cpu = cpu_now()
    got = 0
    start = last = None
    deadline = time.monotonic() + 300
    while got < count + 1 and time.monotonic() < deadline:  # the warm-up message too
        for msg in consumer.consume(1000, 0.1):
            if msg.error() is None:
                last = time.perf_counter()
                start = start or last
                got += 1
    consume = (got - 1) / (last - start) if start and last > start else 0.0
    consume_cpu = cpu_since(cpu)  # from the subscription: the group join's CPU is small
    consumer.close()
    return dict(produce=produce, p99=_percentile(latencies, 0.99) * 1000, consume=consume,
                produce_cpu=produce_cpu, consume_cpu=consume_cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tls-offload-processes", type=int, default=0,
                        help="tlsOffloadProcesses of the standalone (0: TLS in the broker process)")
    parser.add_argument("--variants", default=None, metavar="NAME,...",
                        help="run only these variants, in this order (each protocol's *_plain included)")
    parser.add_argument("--kafka-producer", default="", metavar="KEY=VALUE,...",
                        help="librdkafka producer settings on top of the bench's (every Kafka variant)")
    parser.add_argument("--pin", default=None, metavar="BROKER_CPUS:OTHER_CPUS",
                        help="e.g. 0:1: the broker on CPU 0, the clients and TLS workers on CPU 1")
    args = parser.parse_args()
    PRODUCER_EXTRA.update(item.split("=", 1) for item in args.kafka_producer.split(",") if item)
    work = Path(tempfile.mkdtemp(prefix="nereus-tls-"))
    cert, key = make_cert(work)
    ports = {name: free_port() for name in ("pulsar_tls", "ssl", "sasl", "sasl_ssl")}
    config = work / "standalone.conf"
    config.write_text(
        f"brokerServicePortTls={ports['pulsar_tls']}\n"
        f"tlsCertificateFilePath={cert}\ntlsKeyFilePath={key}\ntlsTrustCertsFilePath={cert}\n"
        "authenticationEnabled=true\n"
        "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken\n"
        f"tokenSecretKey=data:;base64,{base64.b64encode(SECRET).decode()}\n"
        "anonymousUserRole=anonymous\nsuperUserRoles=anonymous,bench\n"
        f"kafkaListeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:{ports['ssl']},"
        f"SASL_PLAINTEXT://127.0.0.1:{ports['sasl']},SASL_SSL://127.0.0.1:{ports['sasl_ssl']}\n"
        "saslAllowedMechanisms=PLAIN\n"
        f"tlsOffloadProcesses={args.tls_offload_processes}\n")
    proc, base_ports = start_nereus(work, ["--compaction-interval", "0", "--config", str(config)])
    BROKER_PID.append(proc.pid)
    try:
        for port in ports.values():
            wait_port(port, proc)
        BROKER_PID.extend(offload_workers(proc.pid))
        if len(BROKER_PID) != 1 + args.tls_offload_processes:
            raise RuntimeError(f"expected {args.tls_offload_processes} TLS offload workers, found {BROKER_PID[1:]}")
        if args.pin:
            pin(proc.pid, args.pin)
        kafka_plain = base_ports["kafka"]  # --kafka-port stands for the PLAINTEXT listener
        pulsar_plain = f"pulsar://127.0.0.1:{base_ports['pulsar']}"
        pulsar_tls = f"pulsar+ssl://localhost:{ports['pulsar_tls']}"
        tls = {"ssl.ca.location": str(cert)}
        sasl = {"sasl.mechanisms": "PLAIN", "sasl.username": "bench", "sasl.password": "token:" + token()}
        variants = {
            "pulsar_plain": lambda: pulsar_round(pulsar_plain, args.messages),
            "pulsar_tls": lambda: pulsar_round(pulsar_tls, args.messages, ca=cert),
            "pulsar_token": lambda: pulsar_round(pulsar_plain, args.messages, auth=pulsar.AuthenticationToken(token())),
            "pulsar_tls_token": lambda: pulsar_round(pulsar_tls, args.messages, ca=cert,
                                                     auth=pulsar.AuthenticationToken(token())),
            "kafka_plain": lambda: kafka_round({"bootstrap.servers": f"127.0.0.1:{kafka_plain}"}, args.messages),
            "kafka_ssl": lambda: kafka_round({"bootstrap.servers": f"localhost:{ports['ssl']}",
                                              "security.protocol": "SSL", **tls}, args.messages),
            "kafka_sasl": lambda: kafka_round({"bootstrap.servers": f"127.0.0.1:{ports['sasl']}",
                                               "security.protocol": "SASL_PLAINTEXT", **sasl}, args.messages),
            "kafka_sasl_ssl": lambda: kafka_round({"bootstrap.servers": f"localhost:{ports['sasl_ssl']}",
                                                   "security.protocol": "SASL_SSL", **tls, **sasl}, args.messages),
        }
        if args.variants:
            variants = {name: variants[name] for name in args.variants.split(",")}
        results: dict[str, list[dict]] = {name: [] for name in variants}
        for round_no in range(args.rounds):
            for name, run in variants.items():
                r = run()
                results[name].append(r)
                print(f"round {round_no + 1} {name}: produce {r['produce']:,.0f} msg/s p99 {r['p99']:.1f} ms "
                      f"(cpu broker {r['produce_cpu'][0]:.2f} s of which TLS workers {r['produce_cpu'][2]:.2f} s, "
                      f"client {r['produce_cpu'][1]:.2f} s), "
                      f"consume {r['consume']:,.0f} msg/s (cpu {r['consume_cpu'][0]:.2f} s, "
                      f"{r['consume_cpu'][1]:.2f} s)", flush=True)
    finally:
        proc.terminate()
        proc.wait(60)
    report(results)


def report(results: dict[str, list[dict]]) -> None:
    """The median round of each variant, with its ratios to the plaintext variant of its protocol.

    ``ratio``: median over median; ``spread``: the lowest and highest of the per-round
    ratios (each round's variant over the same round's plaintext). ``cpu ratio``: the
    plaintext variant's CPU time (broker + client, medians) over this one's, the
    throughput ratio a CPU-bound machine would show; ``broker ms``: broker CPU of the phase (with its TLS
    offload workers'; ``workers ms``: theirs alone).
    """
    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    def med_cpu(name: str, key: str, which: int | None = None) -> float:
        return statistics.median(r[key][0] + r[key][1] if which is None else r[key][which] for r in results[name])

    summary = {}
    print(f"\n{'variant':16} {'produce/s':>9} {'ratio':>5} {'spread':>9} {'p99 ms':>7} {'broker ms':>9} "
          f"{'workers ms':>10} {'cpu ratio':>9}"
          f" {'consume/s':>9} {'ratio':>5} {'spread':>9} {'broker ms':>9} {'cpu ratio':>9}")
    for name in results:
        base = name.split("_")[0] + "_plain"
        row = {"produce": med(name, "produce"), "p99_ms": med(name, "p99"), "consume": med(name, "consume")}
        spread = {}
        for phase in ("produce", "consume"):
            row[f"{phase}_ratio"] = row[phase] / med(base, phase)
            per_round = [r[phase] / b[phase] for r, b in zip(results[name], results[base]) if b[phase]]
            spread[phase] = f"{min(per_round):.2f}-{max(per_round):.2f}"
            row[f"{phase}_broker_cpu_ms"] = med_cpu(name, f"{phase}_cpu", 0) * 1000
            row[f"{phase}_workers_cpu_ms"] = med_cpu(name, f"{phase}_cpu", 2) * 1000
            cpu = med_cpu(name, f"{phase}_cpu")
            row[f"{phase}_cpu_ratio"] = med_cpu(base, f"{phase}_cpu") / cpu if cpu else float("nan")
        print(f"{name:16} {row['produce']:9,.0f} {row['produce_ratio']:5.2f} {spread['produce']:>9} "
              f"{row['p99_ms']:7.1f} {row['produce_broker_cpu_ms']:9.0f} {row['produce_workers_cpu_ms']:10.0f} "
              f"{row['produce_cpu_ratio']:9.2f} "
              f"{row['consume']:9,.0f} {row['consume_ratio']:5.2f} {spread['consume']:>9} "
              f"{row['consume_broker_cpu_ms']:9.0f} {row['consume_cpu_ratio']:9.2f}")
        summary.update({f"{name}_{key}": round(value, 2 if "ratio" in key else 1 if "ms" in key else None)
                        for key, value in row.items()})
    print(" ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
