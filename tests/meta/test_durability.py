"""kill -9 the engine's process mid-write: every acknowledged write must survive."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from nereus.meta import open_engine

WRITER = os.path.join(os.path.dirname(__file__), "crash_writer.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_and_kill(data_dir: str, run: int, rnd: random.Random) -> list[tuple[str, str, int]]:
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, WRITER, data_dir, str(run)], stdout=subprocess.PIPE,
                            env=env, cwd=ROOT)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        time.sleep(rnd.uniform(0.2, 0.8))
        proc.send_signal(signal.SIGKILL)
        out = proc.stdout.read()
    finally:
        proc.kill()
        proc.wait()
    acks = []
    for line in out.split(b"\n")[:-1]:  # the last piece may be a torn line
        _, key, pk, vid = line.decode().split(" ")
        acks.append((key, pk, int(vid)))
    return acks


@pytest.mark.slow
async def test_acknowledged_writes_survive_sigkill(tmp_path):
    rnd = random.Random()
    data_dir = str(tmp_path / "meta")
    all_acks: list[tuple[str, str, int]] = []
    last_tail_vid = 0
    for run in range(4):
        acks = run_and_kill(data_dir, run, rnd)
        assert acks, "the writer acknowledged nothing before being killed"
        tail_vids = [vid for _, pk, vid in acks if pk == "tail"]
        # Same shard: version ids keep increasing across crashes and restarts.
        assert min(tail_vids) > last_tail_vid
        last_tail_vid = max(tail_vids)
        all_acks += acks
    async with open_engine(data_dir, shards=3) as engine:
        c = engine.client()
        for key, pk, vid in all_acks:
            rec = await c.get(key, partition_key=None if pk == "-" else pk)
            assert rec is not None, f"acknowledged {key} lost"
            assert rec.value == key.encode() and rec.version.version_id == vid
    print(f"{len(all_acks)} acknowledged writes survived 4 kill -9")
