"""The ``kafka-metadata`` part of bench/scale.py: a Kafka Metadata answer for every topic of a big cluster.

A ``nereus oxia`` metadata server and one ``nereus broker``. ``--metadata-topics`` topics of
``--metadata-partitions`` partitions each are created with Kafka CreateTopics (confluent-kafka's
admin client, in batches); one message goes to each partition so every partition has an owner
and a leader epoch, as in a cluster in use. Then a Metadata request v12 for all topics
(``topics`` null) is timed on a raw socket, from the request sent to the last byte of the answer
read (the decoding of the answer on the client's side is timed apart, and not counted).

Target: <= 1 s for 100,000 partitions.
"""

from __future__ import annotations

import asyncio
import io
import re
import shutil
import socket
import statistics
import struct
import tempfile
import time
import urllib.request
from pathlib import Path

from _scale_loaded import start_cluster  # bench/ is on sys.path

TARGET_SECONDS = 1.0
METADATA = 3


def add_arguments(parser) -> None:
    parser.add_argument("--metadata-topics", type=int, default=25_000, help="topics (the kafka-metadata part)")
    parser.add_argument("--metadata-partitions", type=int, default=4, help="partitions per topic (the kafka-metadata part)")
    parser.add_argument("--metadata-rounds", type=int, default=5, help="Metadata requests timed (the kafka-metadata part)")


def metadata_frame(correlation_id: int, version: int = 12) -> bytes:
    """A Metadata request for every topic (``topics`` null), size prefix included."""
    from kio.index import load_request_schema
    from kio.schema.request_header.v2.header import RequestHeader
    from kio.serial import entity_writer

    cls = load_request_schema(METADATA, version)
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=METADATA, request_api_version=version,
                                                    correlation_id=correlation_id, client_id="bench"))
    entity_writer(cls)(buf, cls(topics=None, allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False))
    body = buf.getvalue()
    return struct.pack(">i", len(body)) + body


def read_exactly(sock: socket.socket, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = sock.recv(min(size - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)


def timed_metadata(port: int, correlation_id: int) -> tuple[float, bytes]:
    """(seconds from the request sent to the answer's last byte, the answer frame)."""
    with socket.create_connection(("127.0.0.1", port), timeout=300) as sock:
        frame = metadata_frame(correlation_id)
        started = time.perf_counter()
        sock.sendall(frame)
        size = struct.unpack(">i", read_exactly(sock, 4))[0]
        answer = read_exactly(sock, size)
        return time.perf_counter() - started, answer


def partitions_in(answer: bytes, version: int = 12) -> tuple[int, int, int]:
    """(topics, partitions, partitions with a leader) in a Metadata answer frame."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    cls = load_response_schema(METADATA, version)
    resp = entity_reader(cls)(answer, 5)[0]  # correlation id, then the header's empty tagged fields
    parts = [p for t in resp.topics for p in t.partitions]
    return len(resp.topics), len(parts), sum(1 for p in parts if p.leader_id >= 0)


def _metrics(http_port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as response:
        return response.read().decode()


def owned_topics(http_port: int) -> int:
    text = _metrics(http_port)
    match = re.search(r"^nereus_cluster_owned_topics (\S+)$", text, re.M)
    return int(float(match.group(1))) if match else 0


def after_changes(bootstrap: str, ports: dict, partitions: int, total: int, rounds: int) -> list[float]:
    """Answers timed each right after a change: a topic created by CreateTopics on this broker, or
    one created through the Pulsar admin API (heard as a notification), alternately."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    timings = []
    for r in range(rounds * 2):
        name = f"changed-{r}"
        if r % 2 == 0:
            admin.create_topics([NewTopic(name, partitions)])[name].result(60)
        else:
            request = urllib.request.Request(
                f"http://127.0.0.1:{ports['http']}/admin/v2/persistent/public/default/{name}/partitions",
                data=str(partitions).encode(), method="PUT", headers={"Content-Type": "application/json"})
            urllib.request.urlopen(request, timeout=60).close()
        total += partitions
        while True:  # the notification of a change made elsewhere may come a moment later
            seconds, answer = timed_metadata(ports["kafka"], 100 + r)
            if partitions_in(answer)[1] == total:
                break
        timings.append(seconds)
    return timings


def full_collections(http_port: int) -> tuple[int, float]:
    """(count, seconds) of the broker's full garbage collections so far (``nereus_gc_pause_seconds``)."""
    text = _metrics(http_port)
    found = dict(re.findall(r'^nereus_gc_pause_seconds_(count|sum){generation="2"} (\S+)$', text, re.M))
    return int(float(found.get("count", 0))), float(found.get("sum", 0))


def create_topics(bootstrap: str, count: int, partitions: int, progress) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    batch = 500
    for start in range(0, count, batch):
        futures = admin.create_topics([NewTopic(f"m-{i}", partitions) for i in range(start, min(count, start + batch))],
                                      request_timeout=300)
        for future in futures.values():
            future.result(300)
        if (start + batch) % 5000 == 0:
            progress(start + batch)


def produce_everywhere(bootstrap: str, count: int, partitions: int, producers: int = 16) -> None:
    """One message to each partition, from ``producers`` producers at once (each its own connection:
    a partition's first write waits on its load, and a connection's requests are served in order)."""
    from concurrent.futures import ThreadPoolExecutor

    from confluent_kafka import Producer

    def share(first: int) -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "queue.buffering.max.messages": 1_000_000,
                             "topic.metadata.refresh.interval.ms": 600_000, "message.timeout.ms": 0})  # 0: no limit (loading 100k partitions takes long)
        failed = []

        def delivered(err, msg) -> None:
            if err is not None:
                failed.append(f"{msg.topic()}[{msg.partition()}]: {err}")

        for i in range(first, count, producers):
            for p in range(partitions):
                producer.produce(f"m-{i}", b"x", partition=p, on_delivery=delivered)
            producer.poll(0)
        # flush counts what is still queued only: a message that timed out or failed was "delivered"
        if producer.flush(7200) != 0 or failed:
            raise RuntimeError(f"{len(failed)} message(s) not written, e.g. {failed[:3]}")

    with ThreadPoolExecutor(producers) as pool:
        for done in pool.map(share, range(producers)):
            pass


async def run(args) -> dict[str, float]:
    return await asyncio.to_thread(run_metadata, args)


def run_metadata(args) -> dict[str, float]:
    count, partitions = args.metadata_topics, args.metadata_partitions
    total = count * partitions
    workdir = Path(tempfile.mkdtemp(prefix="scale-metadata-", dir=args.dir))
    (workdir / "objects").mkdir()
    oxia, broker, ports = start_cluster(workdir, idle_seconds=0)
    bootstrap = f"127.0.0.1:{ports['kafka']}"
    try:
        started = time.monotonic()
        create_topics(bootstrap, count, partitions, lambda n: print(f"  {n:,} of {count:,} topics created", flush=True))
        print(f"  {count:,} topics ({total:,} partitions) created in {time.monotonic() - started:.0f} s", flush=True)
        started = time.monotonic()
        produce_everywhere(bootstrap, count, partitions)
        print(f"  one message on each partition in {time.monotonic() - started:.0f} s", flush=True)
        owned = owned_topics(ports["http"])
        if owned < total:  # every partition written: each has its owner (and the answer reads no slow path)
            log = (workdir / "processes.log").read_text(errors="replace").splitlines()
            print("\n".join(["  the processes' log, its last lines:", *log[-40:]]), flush=True)
            raise RuntimeError(f"the broker owns {owned:,} of the {total:,} partitions written")
        collections_before = full_collections(ports["http"])
        first, answer = timed_metadata(ports["kafka"], 1)
        decoding = time.perf_counter()
        topics, listed, led = partitions_in(answer)
        decoding = time.perf_counter() - decoding
        if listed != total or led != total:
            raise RuntimeError(f"the answer lists {listed:,} partitions ({led:,} with a leader) of {total:,}")
        timings = [timed_metadata(ports["kafka"], 2 + r)[0] for r in range(args.metadata_rounds)]
        median = statistics.median(timings)
        print(f"  Metadata v12 for {topics:,} topics / {listed:,} partitions ({len(answer) / 2**20:.1f} MiB): first "
              f"{first:.2f} s, then median {median:.2f} s, max {max(timings):.2f} s (target <= {TARGET_SECONDS:.1f} s); "
              f"the client decodes it in {decoding:.1f} s (not counted)", flush=True)
        changed = after_changes(bootstrap, ports, partitions, total, rounds=args.metadata_rounds)
        print(f"  after a topic created (CreateTopics here, or Pulsar's admin API): median "
              f"{statistics.median(changed):.2f} s, max {max(changed):.2f} s", flush=True)
        collections = [after - before for after, before in zip(full_collections(ports["http"]), collections_before)]
        print(f"  the broker's full garbage collections meanwhile: {collections[0]}, {collections[1]:.2f} s in all",
              flush=True)
        return {"metadata_partitions": total, "metadata_first_seconds": round(first, 3),
                "metadata_median_seconds": round(median, 3), "metadata_max_seconds": round(max(timings), 3),
                "metadata_after_change_median_seconds": round(statistics.median(changed), 3),
                "metadata_after_change_max_seconds": round(max(changed), 3),
                "metadata_full_collections": collections[0], "metadata_full_collection_seconds": round(collections[1], 3),
                "metadata_answer_bytes": len(answer)}
    finally:
        for process in (broker, oxia):
            process.terminate()
            try:
                process.wait(60)
            except Exception:  # noqa: BLE001
                process.kill()
        shutil.rmtree(workdir, ignore_errors=True)
