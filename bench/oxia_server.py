"""Topic records through the Oxia protocol: ``nereus oxia`` server process vs in-process.

Creates 100,000 then 1,000,000 records (``/topics/tenant-i/ns-j/topic-k``, ~100-byte
values, must-not-exist puts) across 5 shards from concurrent tasks of the async
``OxiaMetadataStore`` against a ``nereus oxia`` server process, then the same on the
embedded engine in-process (``bench/meta_topics.py``), and prints the ratio.

    .venv/bin/python bench/oxia_server.py                   # 100k then 1M
    .venv/bin/python bench/oxia_server.py --count 20000     # one quick run

The LAST line holds the figures of the last run as key=value pairs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from array import array

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from meta_topics import run as run_embedded, topic_key, topic_value  # noqa: E402

from nereus.meta import EXPECT_ABSENT  # noqa: E402
from nereus.meta.oxia.client import OxiaMetadataStore  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PeakRss:
    """Samples the RSS of another process."""

    def __init__(self, pid: int) -> None:
        self.peak, self._p, self._stop = 0, psutil.Process(pid), threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                self.peak = max(self.peak, self._p.memory_info().rss)
            except psutil.Error:
                return

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return self.peak


def start_server(data_dir: str, shards: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "oxia",
                             "--data-dir", data_dir, "--port", str(port), "--shards", str(shards)],
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the server did not start")


async def run_remote(address: str, count: int, concurrency: int, clients: int) -> dict[str, float]:
    stores = [OxiaMetadataStore(address) for _ in range(clients)]
    lat = array("d", bytes(8 * count))
    next_i = 0
    clock = time.perf_counter

    async def worker(store: OxiaMetadataStore) -> None:
        nonlocal next_i
        while next_i < count:
            i = next_i
            next_i += 1
            t0 = clock()
            await store.put(topic_key(i), topic_value(i), expected_version_id=EXPECT_ABSENT)
            lat[i] = clock() - t0

    await asyncio.gather(*(s.get("/warm-up") for s in stores))  # connect before timing
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(stores[w % clients]) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    for i in (0, count // 2, count - 1):
        rec = await stores[0].get(topic_key(i))
        assert rec is not None and rec.value == topic_value(i), i
    for s in stores:
        await s.close()
    s = sorted(lat)
    return {"creates_per_s": round(count / elapsed), "seconds": round(elapsed, 2),
            "p50_ms": round(s[len(s) // 2] * 1000, 2), "p99_ms": round(s[int(len(s) * 0.99)] * 1000, 2),
            "client_cpu_s": round(cpu, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, action="append", help="records (repeatable; default 100000 then 1000000)")
    ap.add_argument("--shards", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=500)
    ap.add_argument("--clients", type=int, default=2, help="OxiaMetadataStore instances sharing the tasks")
    ap.add_argument("--dir", default=None, help="parent of the (temporary) data directories")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    for count in args.count or [100_000, 1_000_000]:
        d = tempfile.mkdtemp(prefix="oxia-bench-", dir=args.dir)
        try:
            proc, address = start_server(os.path.join(d, "server"), args.shards)
            rss = PeakRss(proc.pid)
            try:
                server_cpu0 = sum(psutil.Process(proc.pid).cpu_times()[:2])
                remote = asyncio.run(run_remote(address, count, args.concurrency, args.clients))
                server_cpu = sum(psutil.Process(proc.pid).cpu_times()[:2]) - server_cpu0
            finally:
                peak = rss.stop()
                proc.terminate()
                proc.wait(30)
            local = asyncio.run(run_embedded(count, args.shards, args.concurrency, os.path.join(d, "embedded")))
        finally:
            shutil.rmtree(d, ignore_errors=True)
        res = {"count": count, "shards": args.shards, "concurrency": args.concurrency, "clients": args.clients,
               **remote, "server_cpu_s": round(server_cpu, 1), "server_peak_rss_mb": round(peak / 2**20),
               "embedded_creates_per_s": local["creates_per_s"], "embedded_p50_ms": local["p50_ms"],
               "embedded_p99_ms": local["p99_ms"],
               "ratio": round(remote["creates_per_s"] / local["creates_per_s"], 3)}
        print(" ".join(f"{k}={v}" for k, v in res.items()), flush=True)


if __name__ == "__main__":
    main()
