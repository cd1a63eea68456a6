"""WalStore appends against the raw disk, same run, same directory.

Workload: appends of 1 KiB entries by N concurrent appenders (closed loop: each appends
again as soon as its last append returned), for N = 1, 16 and 128. Baseline: ``os.write``
of 64 KiB then ``os.fdatasync``, in a loop, on a preallocated file of the same directory:
what one durable write costs this disk. Figures: appends/s, p50 and p99 latency, fsyncs per
append (group commit makes it less than 1), and each latency as a ratio of the baseline's.

Usage: python bench/wal_store.py [--dir DIR] [--seconds 5] [--concurrency 1,16,128].
The last line holds every figure as key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nereus.wal import WalStore  # noqa: E402

ENTRY = os.urandom(1024)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def disk_baseline(directory: Path, seconds: float) -> dict[str, float]:
    """``os.write`` of 64 KiB + ``os.fdatasync``, repeated on a preallocated file."""
    path = directory / "baseline"
    chunk = os.urandom(64 << 10)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, 256 << 20)
        os.fsync(fd)
        latencies = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline and len(latencies) * len(chunk) < (256 << 20):
            started = time.perf_counter()
            os.write(fd, chunk)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - started)
    finally:
        os.close(fd)
        path.unlink()
    return {"writes_per_s": len(latencies) / sum(latencies), "p50": statistics.median(latencies),
            "p99": percentile(latencies, 0.99)}


async def appends(directory: Path, concurrency: int, seconds: float) -> dict[str, float]:
    store = await WalStore.open(directory / f"c{concurrency}")
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds

    async def appender(lane: int) -> None:
        i = 0
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            await store.append(f"block-{lane}", f"wal/{lane}-{i}", ENTRY)
            latencies.append(time.perf_counter() - started)
            i += 1

    began = time.perf_counter()
    await asyncio.gather(*(appender(lane) for lane in range(concurrency)))
    elapsed = time.perf_counter() - began
    fsyncs = store.fsyncs
    await store.close()
    return {"appends_per_s": len(latencies) / elapsed, "p50": statistics.median(latencies),
            "p99": percentile(latencies, 0.99), "fsyncs_per_append": fsyncs / len(latencies)}


async def main(directory: Path, seconds: float, levels: list[int]) -> None:
    loop = asyncio.get_running_loop()
    base = await loop.run_in_executor(None, disk_baseline, directory, seconds)
    print(f"disk baseline (write 64 KiB + fdatasync): {base['writes_per_s']:.0f}/s, "
          f"p50 {base['p50'] * 1e3:.2f} ms, p99 {base['p99'] * 1e3:.2f} ms")
    figures = {"baseline_per_s": round(base["writes_per_s"]), "baseline_p50_ms": round(base["p50"] * 1e3, 3)}
    for concurrency in levels:
        result = await appends(directory, concurrency, seconds)
        print(f"concurrency {concurrency:>3}: {result['appends_per_s']:>8.0f} appends/s "
              f"({result['appends_per_s'] / base['writes_per_s']:.1f}x baseline fsyncs/s), "
              f"p50 {result['p50'] * 1e3:.2f} ms ({result['p50'] / base['p50']:.2f}x), "
              f"p99 {result['p99'] * 1e3:.2f} ms ({result['p99'] / base['p99']:.2f}x), "
              f"{result['fsyncs_per_append']:.3f} fsyncs/append")
        figures.update({f"c{concurrency}_per_s": round(result["appends_per_s"]),
                        f"c{concurrency}_p50_ratio": round(result["p50"] / base["p50"], 2),
                        f"c{concurrency}_p99_ratio": round(result["p99"] / base["p99"], 2),
                        f"c{concurrency}_fsyncs_per_append": round(result["fsyncs_per_append"], 3)})
    print(" ".join(f"{key}={value}" for key, value in figures.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=None, help="a directory on the disk to measure")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,16,128")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wal-bench-", dir=args.dir))
    try:
        uvloop.run(main(work, args.seconds, [int(n) for n in args.concurrency.split(",")]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
