"""Seed experiment: create topic records through the MetadataStore interface.

Creates 100,000 then 1,000,000 records (``/topics/tenant-i/ns-j/topic-k``, 90-byte
values, must-not-exist puts) on a fresh durable embedded engine with 5 shards,
from many concurrent tasks, and reports creates/s, latency percentiles and peak RSS.

    .venv/bin/python bench/meta_topics.py                  # 100k then 1M
    .venv/bin/python bench/meta_topics.py --count 10000000 # one run of 10M

The LAST line holds the figures of the last run as key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from array import array

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nereus.meta import EXPECT_ABSENT, open_engine  # noqa: E402


def topic_key(i: int) -> str:
    return f"/topics/tenant-{i % 97}/ns-{i % 13}/topic-{i:09d}"


def topic_value(i: int) -> bytes:
    return (b'{"partitions":16,"retention_ms":604800000,"owner":"tenant-%02d","id":%09d,"pad":"xxxx"}'
            % (i % 97, i))


class RssWatcher:
    """Samples RSS (incl. mapped LMDB pages) so the peak of one run can be reported."""

    def __init__(self) -> None:
        self.peak = 0
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return max(self.peak, self._proc.memory_info().rss)


async def run(count: int, shards: int, concurrency: int, data_dir: str) -> dict[str, float]:
    engine = open_engine(data_dir, shards=shards)
    client = engine.client()
    lat = array("d", bytes(8 * count))
    next_i = 0
    clock = time.perf_counter

    async def worker() -> None:
        nonlocal next_i
        while next_i < count:
            i = next_i
            next_i += 1
            t0 = clock()
            await client.put(topic_key(i), topic_value(i), expected_version_id=EXPECT_ABSENT)
            lat[i] = clock() - t0

    rss = RssWatcher()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    peak = rss.stop()
    batches = sum(s.batches for s in engine.namespace().shards)
    # Spot-check that what was acknowledged is readable.
    for i in (0, count // 2, count - 1):
        rec = await client.get(topic_key(i))
        assert rec is not None and rec.value == topic_value(i), i
    await client.close()
    await engine.close()
    s = sorted(lat)
    return {
        "count": count,
        "shards": shards,
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "creates_per_s": round(count / elapsed),
        "p50_ms": round(s[len(s) // 2] * 1000, 2),
        "p99_ms": round(s[int(len(s) * 0.99)] * 1000, 2),
        "max_ms": round(s[-1] * 1000, 2),
        "avg_batch": round(count / max(batches, 1), 1),
        "cpu_s": round(cpu, 1),
        "peak_rss_mb": round(peak / 2**20),
        "maxrss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, action="append",
                    help="records to create (repeatable; default: 100000 then 1000000)")
    ap.add_argument("--shards", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=500)
    ap.add_argument("--dir", default=None, help="parent of the (temporary) data directory")
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if not args.no_uvloop:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
    for count in args.count or [100_000, 1_000_000]:
        d = tempfile.mkdtemp(prefix="meta-topics-", dir=args.dir)
        try:
            res = asyncio.run(run(count, args.shards, args.concurrency, d))
            res["disk_mb"] = round(sum(
                os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs) / 2**20)
        finally:
            shutil.rmtree(d, ignore_errors=True)
        print(" ".join(f"{k}={v}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
