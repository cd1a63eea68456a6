"""Publish and end-to-end latency of a standalone on ``file://`` and on S3 with S3 Standard's latency.

The S3 store is a moto server behind the delaying proxy of ``tests/delayed_s3.py`` (each
request waits a lognormal draw fitted to published S3 Standard p50/p99; sources there),
both in processes of their own. For each store, a ``nereus standalone`` (``--brokers N``
broker processes) takes 1 KiB messages on one topic, sent open loop at ``--rate``
msgs/s for ``--seconds`` (the first ``--warmup`` seconds left out of the figures) by:

* ``pulsar``: pulsar-client, batching 1 ms (as ``pulsar_e2e.py``'s latency run);
* ``kafka-linger0`` / ``kafka-linger5``: confluent-kafka, acks=all, linger.ms 0 / 5.

A consumer in its own process reads the topic meanwhile. Latencies run from each
message's scheduled send time (so a client that falls behind its schedule shows it):
publish = until the producer's ack (p50/p99/p999), end to end = until the consumer has
it (p50/p99). On S3 the proxy's records of the same interval give the store's PUT
p50/p99 (delay + moto's time), so the table can set publish p99 against PUT p99.

``--profile X`` runs the brokers with ``--wal-profile X`` (``replicated``: the quorums of ``--quorums``,
ensemble, write and ack; 3,3,2 by default, which needs ``--brokers 3``).

Usage: .venv/bin/python bench/latency_profile.py [--seconds 10] [--rate 10000] [--brokers 1]
       [--stores file,s3] [--clients pulsar,kafka-linger0,kafka-linger5] [--latency-scale 1]
       [--profile object|replicated|local] [--quorums 3,3,2]
With a WAL profile, the brokers' upload lag histograms give each store's upload lag p50/p99
(acknowledged -> in the object store; bucket bounds) over all its cases, and the WAL's disk use.
``--throughput-messages N`` adds Pulsar produce throughput on ``file://``: object, then the profile.
The last line is ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import struct
import sys
import tempfile
import time
import uuid
from array import array
from collections.abc import Callable
from pathlib import Path

import pulsar
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from cluster import percentile, start_standalone  # bench/ is on sys.path
from kafka_e2e import create_topic, unbatched_producer

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.delayed_s3 import DelayedS3  # noqa: E402

SIZE = 1024
PADDING = b"x" * (SIZE - 8)
CLIENTS = ("pulsar", "kafka-linger0", "kafka-linger5")
GRACE_SECONDS = 30  # after the last send, for the last acks and receipts


def payload(i: int) -> bytes:
    """Message ``i``: its index first, so the consumer can tell which one it has."""
    return struct.pack(">Q", i) + PADDING


def index_of(data: bytes) -> int:
    return struct.unpack_from(">Q", data)[0]


def paced(rate: int, seconds: float, send: Callable[[int], None], idle: Callable[[], None]) -> tuple[float, float]:
    """Call ``send(i)`` for i = 0.. at ``rate`` per second, open loop: message i is due at start + i / rate,
    sends that fell behind go at once. Returns (start, achieved send rate)."""
    total = int(rate * seconds)
    start = time.monotonic()
    i = 0
    while i < total:
        due = min(total, int((time.monotonic() - start) * rate) + 1)
        while i < due:
            send(i)
            i += 1
        idle()
    return start, total / (time.monotonic() - start)


# -- consumers, each in its own process (monotonic clocks agree across processes on Linux) ---------------
def _receive_until(total: int, conn, receive: Callable[[], bytes | None]) -> None:
    got = array("d", bytes(8 * total))
    count = 0
    while count < total and not conn.poll():
        data = receive()
        if data is not None:
            i = index_of(data)
            if i < total and got[i] == 0.0:  # the Kafka producer's warm-up message is past the end
                got[i] = time.monotonic()
                count += 1
    conn.send_bytes(got.tobytes())


def _pulsar_consumer(url: str, topic: str, total: int, conn) -> None:
    client = pulsar.Client(url, io_threads=1, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(topic, "e2e", initial_position=pulsar.InitialPosition.Earliest,
                                receiver_queue_size=10_000)
    conn.send("ready")
    received = [0]

    def receive() -> bytes | None:
        try:
            message = consumer.receive(timeout_millis=200)
        except pulsar.Timeout:
            return None
        received[0] += 1
        if received[0] % 1000 == 0:
            consumer.acknowledge_cumulative(message)
        return message.data()

    _receive_until(total, conn, receive)
    client.close()


def _kafka_consumer(bootstrap: str, topic: str, total: int, conn) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"e2e-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    consumer.consume(1, 1.0)  # connected and fetching before the first send
    conn.send("ready")
    pending: list = []

    def receive() -> bytes | None:
        if not pending:
            # What has arrived, without waiting for more; else wait for one: a batch call with a
            # timeout would hold received messages until the batch fills or the timeout ends.
            pending.extend(consumer.consume(1000, 0) or filter(None, [consumer.poll(0.2)]))
            pending[:] = [m for m in pending if not m.error()]
        return pending.pop(0).value() if pending else None

    _receive_until(total, conn, receive)
    consumer.close()


def _measure(consumer_target, consumer_args: tuple, total: int, produce: Callable[[], tuple[float, float, array]],
             rate: int, warmup: float) -> dict[str, float]:
    """Start the consumer process, run ``produce`` (returns start, achieved rate, ack times), collect."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    consumer = ctx.Process(target=consumer_target, args=(*consumer_args, total, child))
    consumer.start()
    try:
        if not parent.poll(60) or parent.recv() != "ready":
            raise RuntimeError("the consumer did not start")
        start, achieved, acked = produce()
        if not parent.poll(GRACE_SECONDS):
            parent.send("stop")
        got = array("d")
        got.frombytes(parent.recv_bytes())
    finally:
        consumer.join(30)
        if consumer.is_alive():
            consumer.kill()
    first = int(warmup * rate)  # the client's and the topic's start-up stay out of the figures
    publish = [(a - (start + i / rate)) * 1000 for i, a in enumerate(acked) if a and i >= first]
    e2e = [(g - (start + i / rate)) * 1000 for i, g in enumerate(got) if g and i >= first]
    if not publish:
        raise RuntimeError("no message was acknowledged")
    return {"rate": achieved, "acked": len(publish) / (total - first), "received": len(e2e) / (total - first),
            "pub_p50": percentile(publish, 0.5), "pub_p99": percentile(publish, 0.99),
            "pub_p999": percentile(publish, 0.999),
            "e2e_p50": percentile(e2e, 0.5) if e2e else float("nan"),
            "e2e_p99": percentile(e2e, 0.99) if e2e else float("nan")}


def pulsar_case(url: str, topic: str, rate: int, seconds: float, warmup: float) -> dict[str, float]:
    total = int(rate * seconds)

    def produce() -> tuple[float, float, array]:
        client = pulsar.Client(url, io_threads=1, operation_timeout_seconds=30,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=1,
                                          max_pending_messages=50_000, block_if_queue_full=True)
        acked = array("d", bytes(8 * total))
        failures = []

        def receipt_for(i: int):
            def receipt(result, _msg_id) -> None:
                acked[i] = time.monotonic()
                if result != pulsar.Result.Ok:
                    failures.append(result)
            return receipt

        start, achieved = paced(rate, seconds, lambda i: producer.send_async(payload(i), receipt_for(i)),
                                lambda: time.sleep(0.0005))
        producer.flush()
        deadline = time.monotonic() + GRACE_SECONDS
        while not all(acked) and time.monotonic() < deadline:
            time.sleep(0.05)
        producer.close()
        client.close()
        if failures:
            raise RuntimeError(f"{len(failures)} sends failed, first: {failures[0]}")
        return start, achieved, acked

    return _measure(_pulsar_consumer, (url, topic), total, produce, rate, warmup)


def kafka_case(bootstrap: str, topic: str, rate: int, seconds: float, linger_ms: int,
               warmup: float) -> dict[str, float]:
    total = int(rate * seconds)

    def produce() -> tuple[float, float, array]:
        producer = unbatched_producer(bootstrap) if linger_ms == 0 else Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": linger_ms,
             "queue.buffering.max.messages": 200_000, "enable.idempotence": False})
        producer.produce(topic, payload(1 << 62), partition=0)  # connected and the leader known before the clock starts
        producer.flush(30)
        acked = array("d", bytes(8 * total))
        errors = []

        def delivered(err, _msg, i: int) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked[i] = time.monotonic()

        start, achieved = paced(
            rate, seconds,
            lambda i: producer.produce(topic, payload(i), partition=0,
                                       on_delivery=lambda e, m, i=i: delivered(e, m, i)),
            lambda: producer.poll(0.0005))
        producer.flush(GRACE_SECONDS)
        if errors:
            raise RuntimeError(f"{len(errors)} delivery errors, first: {errors[0]}")
        return start, achieved, acked

    return _measure(_kafka_consumer, (bootstrap, topic), total, produce, rate, warmup)


def store_requests(records: list[dict]) -> dict[str, float]:
    """PUT p50/p99 (delay + moto), moto's PUT p99 and request counts from the proxy's records of one case."""
    puts = [r for r in records if r["kind"] == "PUT"]
    out = {"puts": float(len(puts)), "gets": float(sum(r["kind"] == "GET" for r in records)),
           "errors": float(sum(r["status"] >= 500 for r in records))}
    if puts:
        total = [r["delay_ms"] + r["upstream_ms"] for r in puts]
        # moto's own share: on a shared machine its CPU waits show up in the PUT tail.
        out.update(put_p50=percentile(total, 0.5), put_p99=percentile(total, 0.99),
                   moto_put_p99=percentile([r["upstream_ms"] for r in puts], 0.99))
    return out


def run_store(store: str, args, workdir: Path, s3: DelayedS3 | None) -> dict[str, dict[str, float]]:
    extra = profile_args(args.profile, args.quorums)
    if s3 is not None:
        extra += ["--object-store", s3.store_url(f"latency-{uuid.uuid4().hex[:8]}")]
    root = workdir / store
    root.mkdir()
    proc, ports, _names = start_standalone(root, args.brokers, tuple(extra))
    url = "pulsar://" + ",".join(f"127.0.0.1:{ports['pulsar'] + i}" for i in range(args.brokers))
    bootstrap = ",".join(f"127.0.0.1:{ports['kafka'] + i}" for i in range(args.brokers))
    results: dict[str, dict[str, float]] = {}
    try:
        for client in args.clients:
            topic = f"latency-{client}-{uuid.uuid4().hex[:6]}"
            if client != "pulsar":
                create_topic(bootstrap, topic, 1)
            first = s3.stats(1 << 62)["count"] if s3 is not None else 0
            if client == "pulsar":
                figures = pulsar_case(url, f"persistent://public/default/{topic}", args.rate, args.seconds,
                                      args.warmup)
            else:
                figures = kafka_case(bootstrap, topic, args.rate, args.seconds, int(client.rsplit("linger", 1)[1]),
                                     args.warmup)
            if s3 is not None:
                figures.update(store_requests(s3.stats(first)["records"]))
            results[client] = figures
        if args.profile != "object":  # the histograms count every case of this store together
            http = [f"http://127.0.0.1:{ports['http'] + i}" for i in range(args.brokers)]
            lag = upload_lag(http)
            print(f"{store} upload lag: " + ", ".join(f"{k}={v:,.1f}" for k, v in lag.items()), flush=True)
            for figures in results.values():
                figures.update(lag)
            print(f"{store} {client}: " + ", ".join(f"{k}={v:,.1f}" for k, v in figures.items()), flush=True)
    finally:
        proc.terminate()
        proc.wait(90)
    return results


def upload_lag(http_urls: list[str]) -> dict[str, float]:
    """Upload lag (append acknowledged on the WAL replicas -> object in the store) from the brokers'
    histograms: its p50 and p99 (bucket upper bounds) and how many objects were uploaded; the WAL
    replicas' disk use at the end (bytes of segment files)."""
    import re
    import urllib.request

    buckets: dict[float, float] = {}
    held = 0.0
    for url in http_urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
            text = response.read().decode()
        for bound, count in re.findall(r'^nereus_storage_wal_upload_lag_seconds_bucket\{le="([^"]+)"\} (\S+)$',
                                       text, re.M):
            buckets[float(bound)] = buckets.get(float(bound), 0.0) + float(count)
        held += sum(float(v) for v in re.findall(r"^nereus_wal_held_bytes (\S+)$", text, re.M))
    total = buckets.get(float("inf"), 0.0)
    out = {"uploads": total, "wal_bytes": held}
    for name, q in (("lag_p50", 0.5), ("lag_p99", 0.99)):
        out[name] = next((bound * 1000 for bound, count in sorted(buckets.items()) if total and count >= q * total),
                         0.0)
    return out


def profile_args(profile: str, quorums: str) -> list[str]:
    extra = ["--wal-profile", profile]
    if profile == "replicated":
        ensemble, write, ack = quorums.split(",")
        extra += ["--wal-ensemble", ensemble, "--wal-write-quorum", write, "--wal-ack-quorum", ack]
    return extra


def throughput(args, workdir: Path) -> dict[str, float]:
    """Pulsar produce throughput (1 KiB, batching, 4 producer processes; ``pulsar_e2e.produce``) of the
    ``object`` and the ``--profile`` profile on ``file://``, one after the other in this run."""
    from pulsar_e2e import produce

    out: dict[str, float] = {}
    for profile in ("object", args.profile):
        root = workdir / f"throughput-{profile}"
        root.mkdir()
        proc, ports, _names = start_standalone(root, args.brokers, tuple(profile_args(profile, args.quorums)))
        try:
            url = "pulsar://" + ",".join(f"127.0.0.1:{ports['pulsar'] + i}" for i in range(args.brokers))
            topic = f"persistent://public/default/throughput-{uuid.uuid4().hex[:6]}"
            produce(url, topic, payload(0), 2_000, 1)  # the topic loaded and the clients warm
            out[profile] = produce(url, topic, payload(0), args.throughput_messages, 4)
        finally:
            proc.terminate()
            proc.wait(90)
        print(f"file {profile}: {out[profile]:,.0f} msgs/s acknowledged", flush=True)
    return out


def table(results: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    def ms(figures: dict[str, float], key: str) -> str:
        return f"{figures[key]:,.1f}" if key in figures else "-"

    lines = ["| store | client | sent msgs/s | publish p50 | p99 | p999 | e2e p50 | e2e p99 | store PUT p50 | PUT p99 "
             "| PUTs | publish p99 / PUT p99 |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for store, by_client in results.items():
        for client, f in by_client.items():
            ratio = f"{f['pub_p99'] / f['put_p99']:.2f}" if "put_p99" in f else "-"
            lines.append(f"| {store} | {client} | {f['rate']:,.0f} | {ms(f, 'pub_p50')} | {ms(f, 'pub_p99')} | "
                         f"{ms(f, 'pub_p999')} | {ms(f, 'e2e_p50')} | {ms(f, 'e2e_p99')} | {ms(f, 'put_p50')} | "
                         f"{ms(f, 'put_p99')} | {f.get('puts', 0):,.0f} | {ratio} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="sending time per case")
    parser.add_argument("--warmup", type=float, default=1.0, help="first seconds of each case left out of the figures")
    parser.add_argument("--rate", type=int, default=10_000, help="msgs/s, open loop")
    parser.add_argument("--brokers", type=int, default=1, help="broker processes of the standalone")
    parser.add_argument("--stores", default="file,s3", help="comma-separated: file, s3 (delayed)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help=f"comma-separated of {', '.join(CLIENTS)}")
    parser.add_argument("--latency-scale", type=float, default=1.0, help="multiplies every S3 delay (0: none)")
    parser.add_argument("--seed", type=int, default=0, help="of the S3 delays")
    parser.add_argument("--profile", default="object", choices=("object", "replicated", "local"),
                        help="the brokers' WAL profile")
    parser.add_argument("--quorums", default="3,3,2", help="ensemble,write,ack of the replicated profile")
    parser.add_argument("--throughput-messages", type=int, default=0,
                        help="also measure Pulsar produce throughput of object vs --profile on file:// with this "
                             "many messages (0: not)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    args.clients = [c for c in args.clients.split(",") if c]
    if unknown := set(args.clients) - set(CLIENTS):
        parser.error(f"unknown clients {sorted(unknown)}")
    stores = [s for s in args.stores.split(",") if s]

    workdir = Path(tempfile.mkdtemp(prefix="latency-profile-"))
    results: dict[str, dict[str, dict[str, float]]] = {}
    s3 = DelayedS3(workdir / "delayed-s3", latency_scale=args.latency_scale, seed=args.seed) if "s3" in stores else None
    try:
        if s3 is not None:
            s3.start()
        for store in stores:
            results[store] = run_store(store, args, workdir, s3 if store == "s3" else None)
        rates = throughput(args, workdir) if args.throughput_messages else {}
    finally:
        if s3 is not None:
            s3.stop()
        if args.keep:
            print(f"work directory: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{args.rate:,} msgs/s of {SIZE} B for {args.seconds:g} s per case (the first {args.warmup:g} s left "
          f"out), {args.brokers} broker(s), "
          f"profile {args.profile}, S3 latency scale {args.latency_scale:g}; latencies in ms")
    print("\n".join(table(results)))
    pairs = {f"{store}_{client}_{k}": v for store, by_client in results.items()
             for client, figures in by_client.items() for k, v in figures.items()}
    if "file" in results and "s3" in results:
        for client in args.clients:
            for key in ("pub_p50", "pub_p99", "e2e_p99"):
                ratio = results["s3"][client][key] / results["file"][client][key]
                pairs[f"ratio_s3_file_{client}_{key}"] = ratio
            print(f"{client}: S3 / file publish p50 x{pairs[f'ratio_s3_file_{client}_pub_p50']:.1f}, "
                  f"p99 x{pairs[f'ratio_s3_file_{client}_pub_p99']:.1f}, "
                  f"e2e p99 x{pairs[f'ratio_s3_file_{client}_e2e_p99']:.1f}")
    for profile, rate in rates.items():
        pairs[f"throughput_{profile}"] = rate
    if len(rates) == 2:
        ratio = rates[args.profile] / rates["object"]
        pairs[f"ratio_throughput_{args.profile}_object"] = ratio
        print(f"Pulsar produce throughput on file://: {args.profile} {rates[args.profile]:,.0f} msgs/s, object "
              f"{rates['object']:,.0f} msgs/s: x{ratio:.2f}")
    print(" ".join(f"{k}={v:.2f}" for k, v in pairs.items()))


if __name__ == "__main__":
    main()
