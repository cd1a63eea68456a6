"""Compaction throughput against plain pyarrow, and the commit -> SBT visibility lag.

    .venv/bin/python bench/compaction.py [--mb 192] [--streams 2] [--lag-seconds 90]

1. Throughput. A standalone (no schedule) gets ``--mb`` MB of 1 KiB Kafka records
   over ``--streams`` partitions; ``nereus.lakehouse.compaction.run_job`` compacts
   them in a local[2] Spark session (the session is started before the clock runs).
   Baseline in the same run: the same records (their stored entries, read into memory
   beforehand) decoded, turned into Arrow tables and written to Parquet (zstd) with
   plain pyarrow, one file per partition and ``--target-mb`` like compaction. Ratio =
   compaction MB/s of WAL input / pyarrow MB/s (target >= 0.5).
2. Lag (freshness). A standalone with the default compaction schedule (or
   ``--schedule-args``); a Pulsar producer sends each of ``--rates`` msgs/s, first until
   the table covers anything (the worker is running, as in a broker that has been up),
   then for ``--lag-seconds`` measured; the built-in Iceberg table's snapshot offsets are polled every
   0.25 s; lag = first poll that covers a message's offset minus its ack time (targets:
   p50 <= 5 s, p99 <= 15 s). Messages still in the stream's newest, not yet indexed
   slices at the end are not counted. ``--store s3``: the standalone's object store (and
   the tables' files) on S3 with S3 Standard's latency (``tests/delayed_s3.py``). Also
   printed: the worker's runs (count, median MB of input, merges included, and seconds).
3. Tables (``--tables``, after 1): the compacted topic as its built-in Iceberg table
   (zero-copy) and delivered into a Delta and a Hudi table, each read whole with its
   format's reader (pyiceberg, deltalake, hudi-rs); ratio = plain pyarrow reading the
   SBT's Parquet files / the reader (``bench/_table_reads.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests.delayed_s3 (--store s3)
from _procs import start_nereus  # noqa: E402
from _table_reads import table_reads  # noqa: E402


def produce_kafka(bootstrap: str, topic: str, mb: int, partitions: int) -> int:
    import confluent_kafka

    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result(30)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 256 * 1024,
                                         "compression.type": "none"})
    count = mb * 1024
    for i in range(count):
        value = os.urandom(512).hex().encode()  # 1 KiB of hex: compresses about 2:1, like text
        producer.produce(topic, value=value, key=b"key-%d" % (i % 1000), headers=[("i", b"%d" % i)],
                         partition=i % partitions)
        if i % (256 * partitions) == 256 * partitions - 1:
            assert producer.flush(60) == 0  # ~256 KiB entries: many slices, as steady traffic makes
    assert producer.flush(60) == 0
    return count


def baseline_pyarrow(metadata: str, objects: str, topic: str, file_bytes: int) -> dict:
    """Plain pyarrow on the same records, read into memory beforehand (not timed), one
    Parquet file per ``file_bytes`` of entries of a partition (as compaction writes them).

    ``from_entries``: the stored entries -> records (the codec every consumer needs)
    -> Arrow table -> Parquet (zstd). ``from_rows``: only the last two steps, from
    records already decoded into Python values.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from nereus.lakehouse import rows
    from nereus.meta import connect
    from nereus.objstore import open_object_store
    from nereus.storage.cache import BlockCache, TailCache
    from nereus.storage.reader import StreamReader

    async def read_entries():
        meta, store = connect(metadata), open_object_store(objects)
        out = []
        try:
            reader = StreamReader(meta, store, TailCache(1), BlockCache(1))
            for name, partition, stream in await rows.partitions(meta, topic):
                r = await rows.stream_range(meta, name, partition, stream)
                offset = r.start
                while offset < r.end:
                    got = await reader.read(r.stream_id, offset, r.end, 8 << 20)
                    out += [(name, partition, e.base_offset, bytes(e.data)) for e in got]
                    offset = got[-1].end_offset
        finally:
            await store.close()
            await meta.close()
        return out

    def write(batch) -> int:
        columns = list(zip(*batch))
        table = pa.table({
            "partition": pa.array(columns[1], pa.int32()), "offset": pa.array(columns[2], pa.int64()),
            "publish_time": pa.array(columns[3], pa.timestamp("us", tz="UTC")),
            "event_time": pa.array(columns[4], pa.timestamp("us", tz="UTC")),
            "key": pa.array(columns[5], pa.binary()), "value": pa.array(columns[6], pa.binary()),
            "properties": pa.array([list(p.items()) for p in columns[7]], pa.map_(pa.string(), pa.string())),
            "producer_name": pa.array(columns[8], pa.string())})
        sink = io.BytesIO()
        pq.write_table(table, sink, compression="zstd")
        return sink.tell()

    entries = asyncio.run(read_entries())
    files: list[list] = [[]]
    size = 0
    for item in entries:
        if files[-1] and (size + len(item[3]) > file_bytes or files[-1][-1][1] != item[1]):
            files.append([])
            size = 0
        files[-1].append(item)
        size += len(item[3])
    out = 0
    from_entries = from_rows = 0.0
    for chunk in files:  # one file at a time: nothing kept beyond it, as in a compaction task
        started = time.perf_counter()
        records = [row for name, partition, base, data in chunk for row in rows.entry_rows(name, partition, base, data)]
        decoded = time.perf_counter()
        out += write(records)
        done = time.perf_counter()
        from_entries += done - started
        from_rows += done - decoded
        del records
    return {"from_entries_s": from_entries, "from_rows_s": from_rows, "parquet_bytes": out}


def throughput(args, workdir: Path) -> dict:
    from nereus.lakehouse import compaction
    from nereus.lakehouse.session import local_session

    (workdir / "tp").mkdir(parents=True, exist_ok=True)
    proc, ports = start_nereus(workdir / "tp")
    try:
        metadata = f"oxia://127.0.0.1:{ports['oxia']}"
        objects = (workdir / "tp" / "nereus" / "objects").resolve().as_uri()
        count = produce_kafka(f"127.0.0.1:{ports['kafka']}", "bench-compact", args.mb, args.streams)
        time.sleep(1)
        spark = local_session("bench-compaction")
        try:
            spark.sparkContext.parallelize([0, 1], 2).count()  # executors warm, as in a long-running worker
            report = compaction.run_job(spark, metadata, objects, topics=["bench-compact"],
                                        target_bytes=args.target_mb << 20)
        finally:
            spark.stop()
        base = baseline_pyarrow(metadata, objects, "bench-compact", args.target_mb << 20)
        tables = table_reads(metadata, objects, "bench-compact", workdir / "tables") if args.tables else {}
    finally:
        proc.terminate()
        proc.wait(30)
    mb_in = report.input_bytes / 1e6
    return {"records": count, "wal_mb": round(mb_in, 1), "ranges": report.compacted,
            "compact_s": round(report.seconds, 2), "compact_mb_s": round(mb_in / report.seconds, 1),
            "pyarrow_s": round(base["from_entries_s"], 2), "pyarrow_mb_s": round(mb_in / base["from_entries_s"], 1),
            "ratio": round(base["from_entries_s"] / report.seconds, 2),
            "pyarrow_from_rows_mb_s": round(mb_in / base["from_rows_s"], 1),
            "ratio_from_rows": round(base["from_rows_s"] / report.seconds, 2),
            "parquet_mb": round(report.output_bytes / 1e6, 1),
            "pyarrow_parquet_mb": round(base["parquet_bytes"] / 1e6, 1), **tables}


def lag(args, workdir: Path, rate: int, s3=None) -> dict:
    import pulsar

    from nereus.lakehouse import sbt

    workdir = workdir / f"rate-{rate}"
    (workdir / "lag").mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "lag" / "nereus"
    store = [] if s3 is None else ["--object-store", s3.store_url(f"lag-{rate}")]
    # The default schedule unless given; on S3 the standalone keeps the tables' catalog in its data dir.
    proc, ports = start_nereus(workdir / "lag", args.schedule_args.split() + store)
    topic = "persistent://public/default/bench-lag"
    acked: dict[int, float] = {}
    visible: dict[int, float] = {}
    try:
        objects = data_dir.joinpath("objects").resolve().as_uri() if s3 is None else s3.store_url(f"lag-{rate}")
        catalog_uri = f"sqlite:///{data_dir.resolve() / 'iceberg' / 'catalog.db'}"
        client = pulsar.Client(f"pulsar://127.0.0.1:{ports['pulsar']}", logger=pulsar.ConsoleLogger(
            pulsar.LoggerLevel.Error))
        producer = client.create_producer(topic, batching_enabled=False)
        lock = threading.Lock()

        warming = [True]

        def on_ack(res, mid):
            if res == pulsar.Result.Ok and not warming[0]:
                with lock:
                    acked[mid.entry_id()] = time.monotonic()

        # Warm-up at the same rate until the worker (its JVM started once some stream had work)
        # has made the table cover something: a broker's worker is already running.
        catalog = None
        started, sent, check_at = time.monotonic(), 0, time.monotonic() + 0.5
        while time.monotonic() - started < 300:
            if sent < (time.monotonic() - started) * rate:
                producer.send_async(b"x" * 200, on_ack)
                sent += 1
                continue
            if time.monotonic() >= check_at:
                check_at = time.monotonic() + 0.5
                catalog = catalog or _try_catalog(sbt, catalog_uri, objects)
                if catalog and _covered(sbt, catalog, topic):
                    break
            time.sleep(0.001)
        warming[0] = False
        stop = time.monotonic() + args.lag_seconds
        poll_at = time.monotonic() + 0.25
        sent = 0
        while time.monotonic() < stop + 90:  # keep polling after the producer stops
            now = time.monotonic()
            if now < stop and sent < (now - (stop - args.lag_seconds)) * rate:
                producer.send_async(b"x" * 200, on_ack)
                sent += 1
                continue
            if now >= poll_at:
                poll_at = now + 0.25
                catalog = catalog or _try_catalog(sbt, catalog_uri, objects)
                covered = _covered(sbt, catalog, topic) if catalog else 0
                with lock:
                    for offset in [o for o in acked if o < covered and o not in visible]:
                        visible[offset] = now
                if now > stop and len(visible) >= len(acked) - 16:
                    break
            time.sleep(0.001)
        producer.flush()
        client.close()
    finally:
        proc.terminate()
        proc.wait(60)
        if not visible:
            print((workdir / "lag" / "nereus.log").read_text()[-12000:])
    lags = sorted(visible[o] - acked[o] for o in visible)
    return {"rate": rate, "sent": sent, "acked": len(acked), "visible": len(visible),
            "lag_p50_s": round(statistics.median(lags), 1) if lags else None,
            "lag_p99_s": round(lags[int(len(lags) * 0.99)], 1) if lags else None,
            "lag_max_s": round(lags[-1], 1) if lags else None, **_worker_runs(workdir / "lag")}


_RUN_LINE = re.compile(r"compacted \d+ of \d+ range\(s\): ([\d.]+) MB of WAL -> [\d.]+ MB Parquet in ([\d.]+) s")


def _worker_runs(data_dir: Path) -> dict:
    """The worker's runs that compacted something: count, median MB of input (merges included) and seconds."""
    runs = [(float(mb), float(s)) for log in data_dir.rglob("compaction.log")
            for mb, s in _RUN_LINE.findall(log.read_text(errors="replace"))]
    if not runs:
        return {"runs": 0}
    return {"runs": len(runs), "run_mb_p50": round(statistics.median(r[0] for r in runs), 1),
            "run_s_p50": round(statistics.median(r[1] for r in runs), 2),
            "run_s_max": round(max(r[1] for r in runs), 2)}


def _try_catalog(sbt, uri, objects):
    if not Path(uri[len("sqlite:///"):]).exists():  # opening would create it: the worker does
        return None
    try:
        return sbt.store_catalog(uri, objects)
    except Exception:
        return None


def _covered(sbt, catalog, topic) -> int:
    try:
        table = catalog.load_table(sbt.identifier(topic))
    except Exception:
        return 0
    ranges = sbt.read_offsets(table).get("-1", [])
    return ranges[0][1] if ranges and ranges[0][0] == 0 else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=192)
    parser.add_argument("--streams", type=int, default=2)
    parser.add_argument("--target-mb", type=int, default=32)
    parser.add_argument("--lag-seconds", type=int, default=90)
    parser.add_argument("--rates", default="200,5000", help="msgs/s of each lag run, comma-separated")
    parser.add_argument("--schedule-args", default="", help="standalone flags for the lag runs' schedule")
    parser.add_argument("--skip-lag", action="store_true")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--tables", action="store_true", help="also read the topic as Iceberg, Delta and Hudi tables")
    parser.add_argument("--store", choices=("file", "s3"), default="file",
                        help="the lag runs' object store: file://, or S3 with S3 Standard's latency (moto behind "
                             "tests/delayed_s3.py)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_throughput:
            result = throughput(args, Path(tmp))
            print("throughput", " ".join(f"{k}={v}" for k, v in result.items()), flush=True)
        s3 = None
        if args.store == "s3" and not args.skip_lag:
            from tests.delayed_s3 import DelayedS3

            s3 = DelayedS3(Path(tmp) / "s3")
            s3.start()
        try:
            for rate in ([] if args.skip_lag else [int(r) for r in args.rates.split(",")]):
                result = lag(args, Path(tmp), rate, s3)
                print(f"sbt_lag store={args.store}", " ".join(f"{k}={v}" for k, v in result.items()), flush=True)
        finally:
            if s3 is not None:
                s3.stop()


if __name__ == "__main__":
    main()
