"""kill -9 of the server under load: acknowledged writes survive, clients reconnect,
and concurrent histories across a restart stay linearizable."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from nereus.meta.oxia.client import OxiaMetadataStore
from tests.oxia.linearizability import INF, Op, check
from tests.oxia.serverproc import ROOT, ServerProcess


class Reader(threading.Thread):
    """Collects a child's stdout lines as they come."""

    def __init__(self, proc: subprocess.Popen):
        super().__init__(daemon=True)
        self.proc, self.lines = proc, []
        self.start()

    def run(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.decode())

    def count(self, prefix: str) -> int:
        return sum(1 for line in list(self.lines) if line.startswith(prefix))


def _spawn(*args: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-m", "tests.oxia.workers", *args], stdout=subprocess.PIPE, cwd=ROOT)
    assert p.stdout.readline() == b"ready\n"
    return p


def _wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
async def test_acknowledged_writes_survive_kill9_and_clients_reconnect(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), shards=3).start()
    writer = _spawn("writer", srv.address, "crash")
    out = Reader(writer)
    try:
        for _ in range(2):
            before = out.count("ack")
            _wait_for(lambda: out.count("ack") > before + 200, 60, "writes under load")
            srv.kill()
            time.sleep(0.3)
            srv.start()
            after_restart = out.count("ack")
            # The same client process carries on against the restarted server.
            _wait_for(lambda: out.count("ack") > after_restart + 200, 60, "writes after the restart")
    finally:
        writer.kill()
        writer.wait()
        out.join(5)
    acks = [line.split() for line in out.lines if line.startswith("ack") and line.endswith("\n")]
    tail = [int(vid) for _, _, pk, vid in acks if pk == "tail"]
    assert len(set(tail)) == len(tail)  # one shard: every acknowledged version id is distinct
    async with OxiaMetadataStore(srv.address, "crash") as c:
        for _, key, pk, vid in acks:
            rec = await c.get(key, partition_key=None if pk == "-" else pk)
            assert rec is not None, f"acknowledged {key} lost"
            assert rec.value == key.encode() and rec.version.version_id == int(vid)
    srv.stop()
    print(f"{len(acks)} acknowledged writes survived 2 kill -9; {out.count('err')} in-flight failures")


@pytest.mark.slow
async def test_histories_across_restart_are_linearizable(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), shards=3).start()
    workers = [_spawn("history", srv.address, "lin", str(w), "4", str(1000 + w)) for w in range(4)]
    readers = [Reader(p) for p in workers]
    try:
        time.sleep(1.5)
        srv.kill()
        time.sleep(0.3)
        srv.start()
        for p in workers:
            p.wait(60)
    finally:
        for p in workers:
            p.kill()
        srv.stop()
    per_key: dict[str, list[Op]] = {}
    unknown = 0
    for r in readers:
        r.join(5)
        for line in r.lines:
            rec = json.loads(line)
            ret = INF if rec["ret"] is None else rec["ret"]
            unknown += ret == INF
            arg = tuple(rec["arg"]) if rec["kind"] == "cas" else rec.get("arg")
            per_key.setdefault(rec["key"], []).append(Op(rec["call"], ret, rec["kind"], arg, rec.get("result")))
    total = sum(len(h) for h in per_key.values())
    assert total > 200
    after = sum(1 for h in per_key.values() for op in h if op.call > min(o.call for o in h) + 2.0)
    assert after > 20, "the clients did not carry on after the restart"
    for key, hist in per_key.items():
        assert check(hist), f"history of {key} is not linearizable"
    print(f"{total} operations on {len(per_key)} registers ({unknown} of unknown outcome): linearizable")
