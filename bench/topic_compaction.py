"""Key-based topic compaction: a model check at scale, build throughput, compacted-reader startup.

Against a ``nereus standalone`` started here (its own data dir, free ports):

1. **model** (``--updates`` over ``--keys``, ~1 in 11 a tombstone): a Pulsar topic and a
   Kafka ``cleanup.policy=compact`` topic (``delete.retention.ms=0``) get the same
   updates; the first 60 % while compactions of both run one after the other, then
   chunks until a build is seen RUNNING, when the process is killed (SIGKILL),
   restarted on the same data dir, given the rest and compacted again. A
   ``read_compacted`` reader and a Kafka consumer from offset 0 must then see exactly
   the latest value of each key at its original MessageId / offset, tombstoned keys
   absent; the collector must leave no orphan object.
2. **throughput and startup** (``--startup-updates`` over ``--startup-keys``, produced
   with batching to a Pulsar topic given a ``compactionThreshold`` policy first, so it
   records its keys as it is written, as a topic meant to be compacted does;
   ``--no-key-log``: no policy, the build reads every stored batch): a full read of the topic (reader from the
   earliest id to the end), the key compaction (MB/s of the stream's bytes, timed by
   polling the admin status; and how far the broker's resident memory peaked above its
   size before), a ``read_compacted`` reader's time to its first message and to the end
   of the view; and, in the same run, plain pyarrow keeping the latest
   record per key of the same records (offset, key, value) read from a Parquet file in
   memory and written back as one (the same input bytes over its time), timed right after
   each build. ``--rounds`` rounds on fresh topics: the medians are reported, and each
   round's ratio (a build takes under a second, so one round is at the mercy of the
   machine's other work). The CPU the broker spent recording keys while the updates
   were written is reported beside it (``key_log_cpu_s``), and the ratio with that
   time added to the build's (``ratio_with_recording``).
3. **kafka**: the same updates produced with confluent-kafka to a ``cleanup.policy=compact``
   topic (``delete.retention.ms=0``, so tombstones go as in the baseline), its build timed
   and compared with the same pyarrow baseline; ``--rounds`` rounds, medians.

Usage: .venv/bin/python bench/topic_compaction.py [--updates 100000] [--keys 1000]
       [--startup-updates 1000000] [--startup-keys 10000] [--rounds 3] [--only model,startup,kafka]
The last line is ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pulsar
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nereus.meta import connect  # noqa: E402
from nereus.storage import key_view, records  # noqa: E402
from tests import compaction_model as cm  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402

SERVER_ARGS = ["--compaction-interval", "0", "--compaction-monitor-interval", "0", "--gc-interval", "0.5",
               "--gc-grace", "1", "--gc-pending-timeout", "20", "--session-timeout", "3"]
KEY_LOG = True  # the Pulsar topics get a compaction policy before they are written (--no-key-log: not)
cm.DEADLINE = 600.0  # at this scale a read or a build takes longer than in the tests


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def model_check(server: Standalone, count: int, keys: int) -> dict:
    ptopic, ktopic = f"persistent://public/default/pmodel-{count}", f"kmodel-{count}"
    data = cm.updates(count, keys)
    cm.create_compacted_topic(server.bootstrap, ktopic, **{"delete.retention.ms": "0"})
    ids, offsets = [None] * count, [None] * count
    chunk = max(count // 20, 1)
    phase_a = count * 6 // 10
    client = pulsar.Client(server.url, operation_timeout_seconds=60)

    acked = [0]

    def produce_a():
        for first in range(0, phase_a, chunk):
            part = data[first:min(first + chunk, phase_a)]
            cm.produce_pulsar(client, ptopic, part, ids, first=first)
            cm.produce_kafka(server.bootstrap, ktopic, part, offsets, first=first)
            acked[0] = first + len(part)

    started = time.monotonic()
    producers = cm.Background(produce_a)
    producers.start()
    cm.wait_until(lambda: acked[0] or not producers.is_alive(), "the first updates")
    compactions = 0
    while True:  # compactions while the producers keep writing
        running = producers.is_alive()
        for topic in (ptopic, ktopic):
            cm.compact(server.http, topic)
        compactions += 1
        if not running:
            break
    producers.result()
    log(f"model: {phase_a} updates written during {compactions} rounds of compaction")

    killed_at = None
    written = phase_a
    while written < count * 9 // 10:
        part = data[written:written + chunk]
        cm.produce_pulsar(client, ptopic, part, ids, first=written)
        cm.produce_kafka(server.bootstrap, ktopic, part, offsets, first=written)
        written += len(part)
        cm.trigger(server.http, ptopic)
        cm.trigger(server.http, ktopic)
        if cm.compaction_status(server.http, ktopic) == "RUNNING":
            killed_at = written
            break
        cm.wait_until(lambda: cm.compaction_status(server.http, ptopic) != "RUNNING", "the Pulsar build")
        cm.wait_until(lambda: cm.compaction_status(server.http, ktopic) != "RUNNING", "the Kafka build")
    client.close()
    server.kill()
    log(f"model: killed during the builds at {killed_at} updates")
    server.start()
    client = pulsar.Client(server.url, operation_timeout_seconds=60)
    try:
        cm.produce_pulsar(client, ptopic, data[written:], ids, first=written)
        cm.produce_kafka(server.bootstrap, ktopic, data[written:], offsets, first=written)
        for topic in (ptopic, ktopic):
            cm.compact(server.http, topic)
        pulsar_ok = cm.read_pulsar(client, pulsar, ptopic, compacted=True) == cm.model(data, ids)
    finally:
        client.close()
    kafka_ok = cm.read_kafka(server.bootstrap, ktopic) == cm.model(data, offsets)
    metadata = f"oxia://127.0.0.1:{server.ports['oxia']}"
    problems = None
    try:
        cm.wait_settled(metadata, server.data_dir / "objects", timeout=120)
    except AssertionError as exc:
        problems = str(exc)
    result = {"model_updates": count, "model_keys": keys, "model_compactions_while_writing": compactions,
              "model_killed_mid_build": killed_at is not None, "model_pulsar_ok": pulsar_ok,
              "model_kafka_ok": kafka_ok, "model_gc_settled": problems is None,
              "model_seconds": round(time.monotonic() - started, 1)}
    if problems:
        log(f"model: {problems}")
    log(f"model: {result}")
    return result


def reset_peak_rss(pid: int) -> bool:
    """Restart the kernel's count of the process's peak resident memory (False: not possible here)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed_build(server: Standalone, topic: str) -> tuple[float, float]:
    """(seconds, MB the broker's resident memory grew to above its size before) of one compaction."""
    pid = server.proc.pid
    before = rss_mb(pid)
    measured = reset_peak_rss(pid)
    t0 = time.monotonic()
    cm.trigger(server.http, topic)
    cm.wait_until(lambda: cm.compaction_status(server.http, topic) == "SUCCESS", "the compaction", 1800, 0.02)
    build_s = time.monotonic() - t0
    return build_s, (peak_rss_mb(pid) - before) if measured else float("nan")


def startup_updates(count: int, keys: int, value_bytes: int) -> list[tuple[bytes, bytes | None]]:
    filler = b"x" * value_bytes
    return [(key, (b"%d-" % i + filler) if value is not None else None)
            for i, (key, value) in enumerate(cm.updates(count, keys, seed=29))]


async def _view_state(metadata: str, topic: str) -> key_view.ViewState:
    meta = connect(metadata)
    try:
        rec = await meta.get(records.name_key(topic))
        return await key_view.state(meta, records.decode(rec.value)["id"])
    finally:
        await meta.close()


def metric(server: Standalone, name: str) -> float:
    """The value of an unlabelled series of the broker's /metrics (0 when absent)."""
    for line in server.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


def recording_cost(server: Standalone) -> tuple[float, float]:
    """(CPU seconds, MB of entries) the broker has spent recording keys so far."""
    return (metric(server, "nereus_key_log_cpu_seconds_total"),
            metric(server, "nereus_key_log_recorded_bytes_total") / 1e6)


def mark_compacted(server: Standalone, topic: str) -> None:
    """Create ``topic`` with a compactionThreshold policy (too high to start a build by itself),
    as a Pulsar topic meant to be compacted has: it then records its keys as they are written."""
    status, body = cm.admin(server.http, "PUT", cm.topic_path(topic))
    assert status == 204, (status, body)
    status, body = cm.admin(server.http, "POST", cm.topic_path(topic) + "/compactionThreshold", 1 << 50)
    assert status == 204, (status, body)


def timed_read(client, topic: str, *, compacted: bool) -> tuple[float, float, int]:
    """(seconds to the first message, seconds to the end, messages) of a reader from the earliest id."""
    started = time.monotonic()
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted,
                                  receiver_queue_size=10000)
    first, n = None, 0
    try:
        while reader.has_message_available():
            reader.read_next(timeout_millis=600_000)
            n += 1
            if first is None:
                first = time.monotonic() - started
    finally:
        reader.close()
    return first or 0.0, time.monotonic() - started, n


def pyarrow_latest_per_key(parquet: bytes) -> tuple[bytes, int]:
    """The latest record of each key (tombstones dropped), read from and written to Parquet."""
    table = pq.read_table(pa.BufferReader(parquet))
    latest = table.group_by("key", use_threads=False).aggregate([("offset", "max")]).column("offset_max")
    keep = pc.and_(pc.is_in(table.column("offset"), value_set=latest), pc.is_valid(table.column("value")))
    out = io.BytesIO()
    kept = table.filter(keep)
    pq.write_table(kept, out, compression="zstd")
    return out.getvalue(), kept.num_rows


def startup_round(server: Standalone, client, topic: str, data) -> dict:
    """One round on a fresh topic: produce, full read, compaction (timed), the pyarrow
    baseline right after it, then the ``read_compacted`` reader."""
    count = len(data)
    if KEY_LOG:
        mark_compacted(server, topic)
    recorded_before = recording_cost(server)
    t0 = time.monotonic()
    ids = cm.produce_pulsar(client, topic, data)
    log(f"startup: {count} updates produced in {time.monotonic() - t0:.1f} s")
    full_first, full_end, full_n = timed_read(client, topic, compacted=False)
    assert full_n == count, (full_n, count)
    log(f"startup: full read {full_n} in {full_end:.2f} s")

    build_s, grew_mb = timed_build(server, topic)
    recorded_cpu = recording_cost(server)[0] - recorded_before[0]
    state = asyncio.run(_view_state(f"oxia://127.0.0.1:{server.ports['oxia']}", topic))
    input_mb = state.stream_size / 1e6
    log(f"startup: compacted {input_mb:.1f} MB in {build_s:.2f} s ({state.records} records kept), "
        f"broker memory +{grew_mb:.0f} MB at its peak")

    arrow_s, kept = pyarrow_baseline(data)
    log(f"startup: plain pyarrow {arrow_s:.2f} s")

    view_first, view_end, view_n = timed_read(client, topic, compacted=True)
    assert view_n == len(cm.model(data, ids)) == kept, (view_n, len(cm.model(data, ids)), kept)
    log(f"startup: read_compacted first message {view_first:.3f} s, end {view_end:.3f} s ({view_n})")
    return {"input_mb": input_mb, "compaction_s": build_s, "pyarrow_s": arrow_s, "peak_growth_mb": grew_mb,
            "ratio": (input_mb / build_s) / (input_mb / arrow_s), "recording_cpu_s": recorded_cpu,
            "ratio_with_recording": arrow_s / (build_s + recorded_cpu), "full_first": full_first, "full_end": full_end,
            "view_first": view_first, "view_end": view_end, "speedup": full_end / view_end}


def pyarrow_baseline(data) -> tuple[float, int]:
    """(seconds, rows kept) of plain pyarrow keeping the latest record per key of ``data``
    (warmed up, the median of three runs)."""
    table = pa.table({"offset": pa.array(range(len(data)), pa.int64()),
                      "key": pa.array([k for k, _ in data], pa.binary()),
                      "value": pa.array([v for _, v in data], pa.binary())})
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    # Warm: pyarrow loads its group-by engine (acero) on the first group_by, a quarter of a
    # second that a broker which has compacted before does not pay either.
    pyarrow_latest_per_key(sink.getvalue())
    times = []
    for _ in range(3):
        t0 = time.monotonic()
        _, kept = pyarrow_latest_per_key(sink.getvalue())
        times.append(time.monotonic() - t0)
    return statistics.median(times), kept


def kafka_round(server: Standalone, topic: str, data) -> dict:
    """One Kafka round on a fresh ``cleanup.policy=compact`` topic (tombstones dropped at
    once, as the baseline drops them): produce, compaction (timed), the pyarrow baseline."""
    cm.create_compacted_topic(server.bootstrap, topic, **{"delete.retention.ms": "0"})
    recorded_before = recording_cost(server)
    t0 = time.monotonic()
    offsets = cm.produce_kafka(server.bootstrap, topic, data)
    log(f"kafka: {len(data)} updates produced in {time.monotonic() - t0:.1f} s")
    build_s, grew_mb = timed_build(server, topic)
    recorded_cpu = recording_cost(server)[0] - recorded_before[0]
    # a Kafka topic created with 1 partition is a partitioned topic of one partition
    state = asyncio.run(_view_state(f"oxia://127.0.0.1:{server.ports['oxia']}",
                                    f"persistent://public/default/{topic}-partition-0"))
    input_mb = state.stream_size / 1e6
    arrow_s, kept = pyarrow_baseline(data)
    assert state.records == len(cm.model(data, offsets)) == kept, (state.records, kept)
    log(f"kafka: compacted {input_mb:.1f} MB in {build_s:.2f} s ({state.records} kept), plain pyarrow {arrow_s:.2f} s, "
        f"broker memory +{grew_mb:.0f} MB at its peak")
    return {"input_mb": input_mb, "compaction_s": build_s, "pyarrow_s": arrow_s, "ratio": arrow_s / build_s,
            "peak_growth_mb": grew_mb, "recording_cpu_s": recorded_cpu,
            "ratio_with_recording": arrow_s / (build_s + recorded_cpu)}


def startup(server: Standalone, count: int, keys: int, value_bytes: int, rounds: int) -> dict:
    """``rounds`` rounds on fresh topics of the same updates; medians, and each round's ratios."""
    data = startup_updates(count, keys, value_bytes)
    client = pulsar.Client(server.url, operation_timeout_seconds=120)
    try:
        done = [startup_round(server, client, f"persistent://public/default/startup-{count}-{i}", data)
                for i in range(rounds)]
    finally:
        client.close()
    med = {k: statistics.median(r[k] for r in done) for k in done[0]}
    result = {"startup_updates": count, "startup_keys": keys, "rounds": rounds, "input_mb": round(med["input_mb"], 1),
              "compaction_s": round(med["compaction_s"], 2), "pyarrow_s": round(med["pyarrow_s"], 2),
              "build_peak_growth_mb": round(med["peak_growth_mb"]),
              "throughput_ratio": round(med["ratio"], 3),
              "throughput_ratios": "/".join(f"{r['ratio']:.3f}" for r in done),
              "key_log_cpu_s": round(med["recording_cpu_s"], 2),
              "ratio_with_recording": round(med["ratio_with_recording"], 3),
              "full_read_end_s": round(med["full_end"], 2), "compacted_first_s": round(med["view_first"], 3),
              "compacted_end_s": round(med["view_end"], 3), "startup_speedup": round(med["speedup"], 1),
              "startup_speedups": "/".join(f"{r['speedup']:.1f}" for r in done)}
    log(f"startup: {result}")
    return result


def kafka_build(server: Standalone, count: int, keys: int, value_bytes: int, rounds: int) -> dict:
    """The build throughput of ``rounds`` Kafka rounds on fresh topics of the same updates (medians)."""
    data = startup_updates(count, keys, value_bytes)
    kafka = [kafka_round(server, f"kstartup-{count}-{i}", data) for i in range(rounds)]
    med = {k: statistics.median(r[k] for r in kafka) for k in kafka[0]}
    result = {"kafka_input_mb": round(med["input_mb"], 1), "kafka_compaction_s": round(med["compaction_s"], 2),
              "kafka_pyarrow_s": round(med["pyarrow_s"], 2), "kafka_throughput_ratio": round(med["ratio"], 3),
              "kafka_build_peak_growth_mb": round(med["peak_growth_mb"]),
              "kafka_throughput_ratios": "/".join(f"{r['ratio']:.3f}" for r in kafka),
              "kafka_key_log_cpu_s": round(med["recording_cpu_s"], 2),
              "kafka_ratio_with_recording": round(med["ratio_with_recording"], 3)}
    log(f"kafka: {result}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--updates", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--startup-updates", type=int, default=1_000_000)
    parser.add_argument("--startup-keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--only", default="model,startup,kafka")
    parser.add_argument("--rounds", type=int, default=3, help="startup rounds, each on a fresh topic (medians)")
    parser.add_argument("--no-key-log", action="store_true",
                        help="the Pulsar topics get no compaction policy, so they record no keys (Kafka compact "
                             "topics always do)")
    args = parser.parse_args()
    global KEY_LOG
    KEY_LOG = not args.no_key_log
    parts = set(args.only.split(","))
    workdir = Path(tempfile.mkdtemp(prefix="nereus-bench-compaction-"))
    server = Standalone(workdir / "data", SERVER_ARGS)
    server.start()
    result: dict = {}
    try:
        if "model" in parts:
            result.update(model_check(server, args.updates, args.keys))
        if "startup" in parts:
            result.update(startup(server, args.startup_updates, args.startup_keys, args.value_bytes, args.rounds))
        if "kafka" in parts:
            result.update(kafka_build(server, args.startup_updates, args.startup_keys, args.value_bytes, args.rounds))
    finally:
        code = server.stop()
        if code != 0:
            log(f"the standalone exited with {code}; its log: {server.log}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print(" ".join(f"{k}={v}" for k, v in result.items()))


if __name__ == "__main__":
    main()
