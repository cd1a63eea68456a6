"""StreamStorage append and catch-up read throughput against the raw disk, same run.

Workload: 100 streams, 1 KiB records in 64 KiB entries, ``file://`` object store,
embedded metadata engine on the same disk. Baselines measured in the same run on
the same directory: sequential writes of the same number of bytes in chunks of the
WAL's object size with one fsync per chunk; and sequential 1 MiB reads of the
objects the append phase wrote. Then append latency at a steady rate (open loop).

A child process probes the disk during the latency phase (puts of the file store's
shape, 50/s): this machine's virtual disk stalls for 0.1-1 s at times (other tenants,
discards of deleted files), and the probe says whether a run's tail is the disk's.

Usage: python bench/storage_append.py [--mib 512] [--streams 100] [--rate 5000] [--meta-shards 1]
[--put-delay 0.05] [--latency-only]. ``--put-delay`` makes every object put take that
much longer (a simulated remote store such as S3); ``--latency-only`` runs the latency
phase alone. The last line holds every figure as key=value pairs.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import multiprocessing
import os

import uvloop
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nereus.broker.node import freeze_startup_objects  # noqa: E402
from nereus.meta import open_engine  # noqa: E402
from nereus.objstore import open_object_store  # noqa: E402
from nereus.objstore.faults import FaultInjectingObjectStore  # noqa: E402
from nereus.storage import StorageOptions, StreamStorage, WalOptions  # noqa: E402

RECORD = 1024
ENTRY = 64 * 1024


def raw_write(path: Path, total: int, chunk: int) -> float:
    """MB/s of fsync'd sequential writes of ``chunk`` bytes (one fsync per chunk)."""
    data = os.urandom(chunk)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    written = 0
    while written < total:
        written += os.write(fd, data)
        os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return written / elapsed / 1e6


def disk_probe(directory: Path, seconds: float, rate: float, out) -> None:
    """In a child process: what the disk alone does meanwhile. Puts of the file store's shape
    (create, 16 KiB write, fsync, link, directory fsync) at ``rate``; latencies in ms to ``out``."""
    directory.mkdir(parents=True, exist_ok=True)
    data = os.urandom(16 << 10)
    latencies, end, i = [], time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        start = time.perf_counter()
        tmp = directory / f"tmp-{i}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        os.link(tmp, directory / f"obj-{i}")
        os.unlink(tmp)
        dir_fd = os.open(directory, os.O_RDONLY)
        os.fsync(dir_fd)
        os.close(dir_fd)
        latencies.append((time.perf_counter() - start) * 1e3)
        i += 1
        time.sleep(max(0.0, 1 / rate - (time.perf_counter() - start)))
    out.send(latencies)


def drop_page_cache(root: Path) -> None:
    """Evict the objects from the page cache so both read phases read the disk."""
    for p in root.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def raw_read(root: Path) -> float:
    files = sorted(p for p in root.rglob("*") if p.is_file())
    drop_page_cache(root)
    start = time.perf_counter()
    total = 0
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    return total / (time.perf_counter() - start) / 1e6


META_SHARDS = 1  # standalone's default on one machine (see --meta-shards)
PUT_DELAY = 0.0  # seconds added to every object put (see --put-delay)


async def open_storage(work: Path, flush_interval: float) -> tuple:
    engine = open_engine(str(work / "meta"), shards=META_SHARDS)
    meta = engine.client()
    objects = open_object_store((work / "objects").resolve().as_uri())
    if PUT_DELAY:
        objects = FaultInjectingObjectStore(objects)
        objects.delay(puts=PUT_DELAY)
    storage = StreamStorage(meta, objects, options=StorageOptions(wal=WalOptions(flush_interval=flush_interval)))
    return engine, meta, objects, storage


async def close_storage(engine, meta, objects, storage) -> None:
    await storage.close()
    await meta.close()
    await objects.close()
    await engine.close()


async def append_phase(work: Path, streams: int, total: int, inflight: int) -> tuple[float, int]:
    engine, meta, objects, storage = await open_storage(work, 0.005)
    handles = [await storage.open_stream(f"bench-{i}", create=True) for i in range(streams)]
    for h in handles:
        await h.append(b"w" * RECORD, 1)  # acquire sessions outside the timed part
    entry = os.urandom(ENTRY)
    per_stream = max(1, total // ENTRY // streams)

    async def writer(h) -> None:
        pending: set[asyncio.Task] = set()
        for _ in range(per_stream):
            pending.add(asyncio.ensure_future(h.append(entry, ENTRY // RECORD)))
            if len(pending) >= inflight:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        await asyncio.gather(*pending)

    start = time.perf_counter()
    await asyncio.gather(*(writer(h) for h in handles))
    elapsed = time.perf_counter() - start
    written = per_stream * streams * ENTRY
    await close_storage(engine, meta, objects, storage)
    return written / elapsed / 1e6, written


async def read_phase(work: Path, streams: int) -> float:
    drop_page_cache(work / "objects")
    engine, meta, objects, storage = await open_storage(work, 0.005)
    handles = [await storage.open_stream(f"bench-{i}") for i in range(streams)]
    for h in handles:
        await h.refresh()

    async def reader(h) -> int:
        offset, got = 0, 0
        while offset < h.next_offset():
            result = await h.fetch(offset, max_bytes=4 << 20)
            got += sum(len(e.data) for e in result.entries)
            offset = result.entries[-1].end_offset
        return got

    start = time.perf_counter()
    sizes = []
    for i in range(0, streams, 8):  # a few consumers at a time, like catch-up readers do
        sizes += await asyncio.gather(*(reader(h) for h in handles[i:i + 8]))
    elapsed = time.perf_counter() - start
    await close_storage(engine, meta, objects, storage)
    return sum(sizes) / elapsed / 1e6


def flush_stages() -> dict[str, tuple[int, float, float]]:
    """Per flush stage (queued, write, ordered, commit): count, mean seconds, and the bucket
    bound under which 99% fell, from the writer's histogram since the process started."""
    from nereus.storage import metrics

    stages = {}
    for metric in metrics.FLUSH_STAGE_SECONDS.collect():
        by_stage: dict[str, dict] = {}
        for sample in metric.samples:
            stage = by_stage.setdefault(sample.labels["stage"], {"buckets": []})
            if sample.name.endswith("_bucket"):
                stage["buckets"].append((float(sample.labels["le"]), sample.value))
            elif sample.name.endswith("_sum"):
                stage["sum"] = sample.value
            elif sample.name.endswith("_count"):
                stage["count"] = sample.value
        for name, stage in by_stage.items():
            count = int(stage.get("count", 0))
            p99 = next((le for le, c in stage["buckets"] if c >= 0.99 * count), float("inf")) if count else 0.0
            stages[name] = (count, stage.get("sum", 0.0) / count if count else 0.0, p99)
    return stages


async def latency_phase(work: Path, streams: int, rate: int, seconds: float) -> tuple[float, float, float]:
    engine, meta, objects, storage = await open_storage(work, 0.005)
    handles = [await storage.open_stream(f"lat-{i}", create=True) for i in range(streams)]
    for h in handles:
        await h.append(b"w", 1)
    record = os.urandom(RECORD)
    n = int(rate * seconds)
    latencies = array.array("d")
    # A broker freezes what start-up made (see freeze_startup_objects), and the load
    # generator keeps no finished task: a full collection walks what serving made.
    freeze_startup_objects()
    running: set[asyncio.Task] = set()

    async def one(h) -> None:
        t = time.perf_counter()
        await h.append(record, 1)
        latencies.append(time.perf_counter() - t)

    start = time.perf_counter()
    for i in range(n):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.ensure_future(one(handles[i % streams]))
        running.add(task)
        task.add_done_callback(running.discard)
    while running:
        await asyncio.gather(*list(running))
    achieved = n / (time.perf_counter() - start)
    await close_storage(engine, meta, objects, storage)
    latencies = sorted(latencies)
    return latencies[len(latencies) // 2] * 1e3, latencies[int(len(latencies) * 0.99)] * 1e3, achieved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512, help="bytes to append, in MiB")
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--inflight", type=int, default=4, help="in-flight appends per stream")
    parser.add_argument("--rate", type=int, default=5000, help="appends/s for the latency phase")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the latency phase")
    parser.add_argument("--meta-shards", type=int, default=1, help="metadata engine shards")
    parser.add_argument("--put-delay", type=float, default=0.0,
                        help="seconds added to every object put (a simulated remote object store)")
    parser.add_argument("--latency-only", action="store_true", help="only the latency phase")
    parser.add_argument("--dir", default=None, help="work directory (default: a temp dir under bench/)")
    args = parser.parse_args()
    global META_SHARDS, PUT_DELAY
    META_SHARDS, PUT_DELAY = args.meta_shards, args.put_delay
    root = work = Path(args.dir or tempfile.mkdtemp(prefix="storage-bench-", dir=Path(__file__).parent))
    try:
        # Latency first, on its own data directory, so the throughput phases' write-back
        # does not land in its fsyncs (and it starts from an empty engine like a new broker).
        # Before: settle what earlier runs left to the disk (deleted files' discards, write-back).
        os.sync()
        time.sleep(2)
        receiver, sender = multiprocessing.Pipe(duplex=False)
        probe = multiprocessing.get_context("fork").Process(
            target=disk_probe, args=(work / "disk-probe", args.seconds, 50.0, sender), daemon=True)
        probe.start()
        p50, p99, achieved = uvloop.run(latency_phase(work / "latency", args.streams, args.rate, args.seconds))
        disk = sorted(receiver.recv())
        probe.join()
        disk_p50, disk_p99, disk_max = disk[len(disk) // 2], disk[int(len(disk) * 0.99)], disk[-1]
        print(f"the disk meanwhile (a put of the file store's shape, 50/s): p50 {disk_p50:.2f} ms, "
              f"p99 {disk_p99:.2f} ms, max {disk_max:.1f} ms")
        if args.latency_only:
            lat_objects = sum(1 for p in (work / "latency" / "objects").rglob("*") if p.is_file())
            print(f"latency at {achieved:.0f} appends/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms, {lat_objects} objects")
            for name, (count, mean, p99_bound) in flush_stages().items():
                print(f"  flush stage {name}: {count} flushes, mean {mean * 1e3:.2f} ms, p99 <= {p99_bound * 1e3:g} ms")
            print(f"put_delay_ms={PUT_DELAY * 1000:.0f} rate={achieved:.0f} p50_ms={p50:.2f} p99_ms={p99:.2f} "
                  f"lat_objects={lat_objects} disk_put_p50_ms={disk_p50:.2f} disk_put_p99_ms={disk_p99:.2f} "
                  f"disk_put_max_ms={disk_max:.1f}")
            return
        work = work / "throughput"
        total = args.mib << 20
        append_mbs, written = uvloop.run(append_phase(work, args.streams, total, args.inflight))
        objects_dir = work / "objects"
        n_objects = sum(1 for p in objects_dir.rglob("*") if p.is_file())
        object_size = max(1 << 16, written // max(1, n_objects))
        raw_w = raw_write(work / "raw.bin", written, object_size)
        read_mbs = uvloop.run(read_phase(work, args.streams))
        raw_r = raw_read(objects_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"append: {append_mbs:.1f} MB/s over {n_objects} objects (avg {object_size / 1e6:.2f} MB); "
          f"raw fsync'd write {raw_w:.1f} MB/s")
    print(f"catch-up read: {read_mbs:.1f} MB/s; raw read {raw_r:.1f} MB/s")
    print(f"latency at {achieved:.0f} appends/s: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(f"put_delay_ms={PUT_DELAY * 1000:.0f} append_mbs={append_mbs:.1f} raw_write_mbs={raw_w:.1f} append_ratio={append_mbs / raw_w:.2f} "
          f"read_mbs={read_mbs:.1f} raw_read_mbs={raw_r:.1f} read_ratio={read_mbs / raw_r:.2f} "
          f"objects={n_objects} rate={achieved:.0f} p50_ms={p50:.2f} p99_ms={p99:.2f} "
          f"disk_put_p50_ms={disk_p50:.2f} disk_put_p99_ms={disk_p99:.2f} disk_put_max_ms={disk_max:.1f}")


if __name__ == "__main__":
    main()
