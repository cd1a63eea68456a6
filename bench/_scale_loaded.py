"""The ``loaded`` part of bench/scale.py: broker memory per loaded idle topic, and after unload.

A ``nereus oxia`` metadata server and one ``nereus broker`` (its own process, a file
object store) with ``--topic-idle-seconds`` set; the broker is what is measured (the
metadata server's growth is reported beside it). A Pulsar
client (the project's asyncio one, many producers at once) opens a producer on each of
``--loaded-topics`` new topics, sends one message and closes it: each topic stays loaded,
idle, with nothing attached. After ``--settle`` seconds (rates and pending index groups
age out) the broker's anonymous RSS (``RssAnon``: its heap) is read against the figure
before the load: bytes per loaded idle topic.
Then the broker unloads them for idleness; once ``pulsar_topics_count`` is back to where
it was, RssAnon is read again: how much of the memory went back to the OS.

Targets: <= 4 KB per loaded idle topic; after unload, RSS within 10% of the start.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _procs import free_port, status_bytes, wait_for, wait_port  # bench/ is on sys.path

from nereus.codec.pulsar import pb
from nereus.pulsar.client.producer import ClusterClient, RemoteProducer

TARGET_BYTES_PER_TOPIC = 4096
TARGET_UNLOAD_RATIO = 1.10


def add_arguments(parser) -> None:
    parser.add_argument("--loaded-topics", type=int, default=20_000, help="topics loaded idle (the loaded part)")
    parser.add_argument("--idle-seconds", type=float, default=60.0,
                        help="the broker's --topic-idle-seconds (the loaded part)")
    parser.add_argument("--settle", type=float, default=15.0,
                        help="seconds between the last load and the memory reading (the loaded part)")
    parser.add_argument("--skip-unload", action="store_true",
                        help="stop after the loaded figure, without waiting for the idle unload (the loaded part)")
    parser.add_argument("--loaded-concurrency", type=int, default=200, help="producers opened at once (the loaded part)")


def rss_anon(pid: int) -> int:
    return status_bytes(pid, "RssAnon")


def rss(pid: int) -> int:
    return status_bytes(pid, "VmRSS")


def topics_loaded(http_port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=30) as response:
        text = response.read().decode()
    match = re.search(r"^pulsar_topics_count (\S+)$", text, re.M)
    return int(float(match.group(1))) if match else 0


async def load_topics(url: str, prefix: str, count: int, concurrency: int, progress) -> None:
    """Open a producer on each of ``count`` topics, send one message, close it."""
    client = ClusterClient(url)
    gate = asyncio.Semaphore(concurrency)
    payload = b"x" * 100
    done = 0

    async def one(i: int) -> None:
        nonlocal done
        name = f"p-{i}"
        async with gate:
            producer = RemoteProducer(client, f"persistent://public/default/{prefix}-{i}", name)
            await producer.open()
            metadata = pb.MessageMetadata(producer_name=name, sequence_id=0,
                                          publish_time=int(time.time() * 1000)).SerializeToString()
            await producer.send(metadata, payload, 0, 0, 1)
            await producer.close()
        done += 1
        if done % 5000 == 0:
            progress(done)

    try:
        await asyncio.gather(*(one(i) for i in range(count)))
    finally:
        client.close()


def _try(action) -> bool:
    try:
        action()
        return True
    except Exception:  # noqa: BLE001 - not ready yet: the caller tries again
        return False


NEREUS = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING"]


def start_cluster(workdir: Path, idle_seconds: float) -> tuple[subprocess.Popen, subprocess.Popen, dict[str, int]]:
    """``nereus oxia`` and one ``nereus broker`` on free ports; returns (metadata server, broker, ports)."""
    ports = {name: free_port() for name in ("oxia", "pulsar", "kafka", "http")}
    log = open(workdir / "processes.log", "ab")
    oxia = subprocess.Popen([*NEREUS, "oxia", "--data-dir", str(workdir / "meta"), "--port", str(ports["oxia"])],
                            stdout=subprocess.DEVNULL, stderr=log)
    wait_port(ports["oxia"], oxia)
    broker = subprocess.Popen(
        [*NEREUS, "broker", "--metadata", f"oxia://127.0.0.1:{ports['oxia']}",
         "--object-store", (workdir / "objects").resolve().as_uri(), "--compaction-interval", "0",
         "--topic-idle-seconds", str(idle_seconds), "--wal-dir", str(workdir / "wal"),
         "--pulsar-port", str(ports["pulsar"]), "--kafka-port", str(ports["kafka"]), "--http-port", str(ports["http"])],
        stdout=subprocess.DEVNULL, stderr=log)
    for name in ("pulsar", "kafka", "http"):
        wait_port(ports[name], broker, timeout=60)
    return oxia, broker, ports


async def run(args) -> dict[str, float]:
    """The part, for bench/scale.py (its clients run their own event loops, in a thread)."""
    return await asyncio.to_thread(run_loaded, args)


def run_loaded(args) -> dict[str, float]:
    count = args.loaded_topics
    workdir = Path(tempfile.mkdtemp(prefix="scale-loaded-"))
    (workdir / "objects").mkdir()
    oxia, proc, ports = start_cluster(workdir, args.idle_seconds)
    url = f"pulsar://127.0.0.1:{ports['pulsar']}"
    try:
        # Warm-up (not counted): imports, first connections, caches that are bounded. Unloaded again
        # before the start is read, so the start is a broker that has been through one load and unload.
        # The first lookups wait for the broker's registration.
        if wait_for(lambda: _try(lambda: asyncio.run(load_topics(url, "first", 1, 1, lambda n: None))), 60, interval=1.0) is None:
            raise RuntimeError("the broker did not serve its first topic within 60 s")
        asyncio.run(load_topics(url, "warm", 1000, args.loaded_concurrency, lambda n: None))
        if not args.skip_unload and wait_for(lambda: topics_loaded(ports["http"]) == 0,
                                             timeout=args.idle_seconds * 3 + 120, interval=1.0) is None:
            raise RuntimeError("the warm-up topics were not unloaded")
        time.sleep(args.settle)
        before, before_total, meta_before = rss_anon(proc.pid), rss(proc.pid), rss(oxia.pid)
        loaded_before = topics_loaded(ports["http"])
        started = time.monotonic()
        asyncio.run(load_topics(url, "t", count, args.loaded_concurrency,
                                lambda n: print(f"  {n:,} of {count:,} topics loaded", flush=True)))
        load_seconds = time.monotonic() - started
        time.sleep(args.settle)
        loaded = topics_loaded(ports["http"])
        after_load = rss_anon(proc.pid)
        per_topic = (after_load - before) / count
        print(f"  {loaded:,} topics loaded ({count:,} new in {load_seconds:.1f} s); RssAnon {before / 2**20:.1f} -> "
              f"{after_load / 2**20:.1f} MiB: {per_topic:,.0f} bytes per loaded idle topic "
              f"(target <= {TARGET_BYTES_PER_TOPIC:,}); VmRSS {before_total / 2**20:.1f} -> "
              f"{rss(proc.pid) / 2**20:.1f} MiB; the metadata server's VmRSS "
              f"{(rss(oxia.pid) - meta_before) / count:,.0f} bytes more per topic", flush=True)
        if loaded - loaded_before < count * 0.99:  # some unloaded for idleness before the reading
            raise RuntimeError(f"only {loaded - loaded_before} of {count} topics stayed loaded; raise --idle-seconds")
        figures = {"loaded_topics": count, "loaded_load_seconds": load_seconds,
                   "loaded_rss_anon_start_mib": before / 2**20, "loaded_rss_anon_loaded_mib": after_load / 2**20,
                   "loaded_bytes_per_topic": per_topic}
        if args.skip_unload:
            return figures
        unloading = time.monotonic()
        back = wait_for(lambda: topics_loaded(ports["http"]) <= loaded_before and time.monotonic(),
                        timeout=args.idle_seconds * 3 + 120, interval=1.0)
        if back is None:
            raise RuntimeError("the idle topics were not unloaded")
        # The heap is trimmed by the first sweep that finds nothing more to unload (sweeps run every
        # quarter of the idle time, at most a minute apart), then in the background.
        time.sleep(min(60.0, args.idle_seconds / 4) + 5)
        after_unload = rss_anon(proc.pid)
        ratio = after_unload / before
        print(f"  unloaded for idleness {back - unloading:.0f} s later; RssAnon {after_unload / 2**20:.1f} MiB "
              f"= {ratio:.2f} x the start (target <= {TARGET_UNLOAD_RATIO:.2f})", flush=True)
        return {**figures, "loaded_rss_anon_unloaded_mib": after_unload / 2**20, "loaded_unload_ratio": ratio}
    finally:
        for process in (proc, oxia):
            process.terminate()
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(workdir, ignore_errors=True)
