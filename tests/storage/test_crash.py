"""kill -9 a writer process at random moments; every acknowledged entry must survive."""

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import GarbageCollector, StreamStorage, records

from .conftest import FAST
from .crash_writer import payload

ROOT = Path(__file__).resolve().parents[2]
STREAMS = 4


def run_and_kill(data_dir: Path, run_id: int, rng: random.Random) -> list[tuple[int, int, int, int]]:
    proc = subprocess.Popen([sys.executable, "-m", "tests.storage.crash_writer", str(data_dir), str(run_id),
                             str(STREAMS)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ready = proc.stdout.readline()
    assert ready.strip() == b"READY", proc.stderr.read().decode()[-2000:]
    time.sleep(rng.uniform(0.05, 0.8))
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate()
    acks = []
    for line in out.decode().splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] == "ACK":  # a torn last line is simply not an ack
            acks.append(tuple(int(p) for p in parts[1:]))
    return acks


async def verify(data_dir: Path, acked: dict) -> int:
    engine = open_engine(str(data_dir / "meta"), shards=4)
    meta = engine.client()
    storage = StreamStorage(meta, open_object_store((data_dir / "objects").resolve().as_uri()), options=FAST)
    total = 0
    try:
        for stream in range(STREAMS):
            handle = await storage.open_stream(f"stream-{stream}")
            await handle.refresh()
            offset, seen = 0, {}
            while offset < handle.next_offset():
                entries = (await handle.fetch(offset, max_bytes=1 << 20)).entries
                for e in entries:
                    assert e.base_offset == offset, "offsets must be dense"
                    head = bytes(e.data[:40]).split(b":")
                    assert int(head[0]) == stream
                    seq = int(head[1])
                    assert seq not in seen, f"entry {seq} stored twice"
                    assert bytes(e.data) == payload(stream, seq), "stored bytes differ"
                    seen[seq] = e.base_offset
                    offset = e.end_offset
            for seq, base in acked[stream].items():
                assert seen.get(seq) == base, f"acknowledged entry {stream}/{seq} at {base} lost"
            total += len(seen)
    finally:
        await storage.close()
        await meta.close()
        await engine.close()
    return total


async def collect_and_check_references(data_dir: Path) -> tuple[int, int]:
    """Run GC as if long after the crashes; every object left must be referenced."""
    engine = open_engine(str(data_dir / "meta"), shards=4)
    meta = engine.client()
    objects = open_object_store((data_dir / "objects").resolve().as_uri())
    try:
        later = time.time() + 3600
        collector = GarbageCollector(meta, objects, clock=lambda: later)
        await collector.collect()
        await collector.collect()  # frees found by the first pass's resolutions
        referenced = set()
        for lo, hi in records.subtree_ranges("/nereus/s"):
            async for rec in meta.range_scan(lo, hi):
                if "/idx/" in rec.key:
                    referenced.update(e.object for e in records.decode_group(rec.value))
                elif rec.key.endswith("/tail"):
                    referenced.update(e.object for e in records.Tail.decode(rec.value).pending)
        root = data_dir / "objects"
        stored = {p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and ".tmp-" not in p.as_posix()}
        assert stored <= referenced, f"unreferenced objects left: {sorted(stored - referenced)[:5]}"
        assert referenced <= stored, f"referenced objects deleted: {sorted(referenced - stored)[:5]}"
        return len(stored), len(referenced)
    finally:
        await meta.close()
        await engine.close()


@pytest.mark.slow
def test_acknowledged_appends_survive_repeated_kill_9(tmp_path):
    rng = random.Random(int(os.environ.get("NEREUS_CRASH_SEED", "20261121")))
    acked = {s: {} for s in range(STREAMS)}
    for run_id in range(1, 9):
        for stream, seq, base, _count in run_and_kill(tmp_path, run_id, rng):
            acked[stream][seq] = base
        stored = asyncio.run(verify(tmp_path, acked))
        assert stored >= sum(len(v) for v in acked.values())
    assert sum(len(v) for v in acked.values()) > 100, "the writer should have made progress"
    asyncio.run(collect_and_check_references(tmp_path))
    asyncio.run(verify(tmp_path, acked))  # the collector deleted nothing still referenced
