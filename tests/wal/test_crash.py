"""kill -9 a process appending to a WalStore: every append it was told is durable survives."""

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nereus.wal import WalStore

from .append_child import payload

ROOT = Path(__file__).resolve().parents[2]


def run_and_kill(directory: Path, run: int, lines_before_kill: int) -> tuple[dict[str, str], set[str]]:
    """The keys (to their block) the child acknowledged, and the blocks it dropped, before it was killed."""
    child = subprocess.Popen([sys.executable, "-m", "tests.wal.append_child", str(directory), str(run)],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"READY", child.stderr.read().decode()[-2000:]
        lines = []
        while len(lines) < lines_before_kill:
            line = child.stdout.readline()  # the kill comes at a moment set by progress, not by a clock
            assert line, child.stderr.read().decode()[-2000:]
            lines.append(line)
        os.kill(child.pid, signal.SIGKILL)
        rest, _ = child.communicate()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    acked: dict[str, str] = {}
    dropped: set[str] = set()
    for line in (b"".join(lines) + rest).decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "ACK":  # a torn last line is no ack
            acked[parts[2]] = parts[1]
        elif len(parts) == 2 and parts[0] == "DROPPED":
            dropped.add(parts[1])
    return acked, dropped


async def check(directory: Path, acked: dict[str, str], dropped: set[str]) -> None:
    store = await WalStore.open(directory, segment_bytes=256 << 10)
    try:
        for key, block in acked.items():
            if block in dropped:
                assert not store.holds(key), f"{key} of dropped block {block} came back"
            else:
                assert await store.read(key) == payload(key), f"acknowledged {key} lost"
        assert not set(store.blocks()) & dropped
    finally:
        await store.close()


@pytest.mark.slow
def test_acknowledged_appends_survive_kill_9(tmp_path):
    rng = random.Random(11)
    acked: dict[str, str] = {}
    dropped: set[str] = set()
    for run in range(4):  # each run reopens what the kill before it left, torn tail and all
        more_acked, more_dropped = run_and_kill(tmp_path, run, rng.randrange(300, 1500))
        acked.update(more_acked)
        dropped |= more_dropped
        assert more_acked, "the child acknowledged nothing"
        asyncio.run(check(tmp_path, acked, dropped))
