"""Cluster-wide workers: one broker at a time runs each, and another takes over when it is gone."""

from __future__ import annotations

import asyncio
import contextlib

from nereus.broker.cluster.lease import run_under_lease
from nereus.meta import open_engine


class Worker:
    """Counts how many copies of it run at once."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.most = 0
        self.runs: list[str] = []

    def factory(self, holder: str):
        async def run() -> None:
            self.running.add(holder)
            self.runs.append(holder)
            self.most = max(self.most, len(self.running))
            try:
                await asyncio.Event().wait()
            finally:
                self.running.discard(holder)

        return run


async def _until(condition, timeout: float = 15.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_one_holder_at_a_time_and_a_takeover_when_the_holder_stops_or_hangs():
    async with open_engine(None, shards=1) as engine:
        metas = {name: engine.client(identity=name, session_timeout=1.0) for name in ("b0", "b1", "b2")}
        worker, status = Worker(), {}
        tasks = {name: asyncio.ensure_future(run_under_lease(meta, "gc", name, worker.factory(name),
                                                             poll_seconds=0.05, status=status))
                 for name, meta in metas.items()}
        try:
            await _until(lambda: len(worker.running) == 1)
            first = next(iter(worker.running))
            tasks.pop(first).cancel()  # a broker that stops: its lease goes with it
            await _until(lambda: len(worker.running) == 1 and first not in worker.running)
            second = next(iter(worker.running))
            metas[second]._pause_heartbeats()  # hung: its session expires, the lease record with it
            await _until(lambda: worker.runs[-1] not in (first, second))
            await _until(lambda: worker.running == {worker.runs[-1]})  # the hung one stopped its copy
            assert worker.most == 1, "two brokers ran the worker at once"
        finally:
            for task in tasks.values():
                task.cancel()
            for task in tasks.values():
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for meta in metas.values():
                await meta.close()
