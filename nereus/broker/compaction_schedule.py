"""The broker's compaction schedule: keeps one ``nereus compact --interval`` worker running.

Compaction runs on Spark, in its own process (a JVM has no place in the broker's
event loop): the broker starts the worker the first time some stream has work
(checked cheaply against the offset index), restarts it if it dies, and stops it
on shutdown. The worker keeps one Spark session and compacts every ``interval``
seconds, then syncs the topics' SBT tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import sys
from dataclasses import dataclass

from ..lakehouse.compaction import plan_tasks
from ..meta import MetadataStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactionSchedule:
    interval: float  # seconds between runs; 0 disables the schedule
    max_age: float  # compact a stream's last range once its oldest record is this old (seconds)
    min_bytes: int  # ... or once it holds this many bytes
    metadata_url: str
    objects_url: str


async def run_schedule(meta: MetadataStore, schedule: CompactionSchedule) -> None:
    """Until cancelled: start (and restart) the compaction worker once there is work."""
    if importlib.util.find_spec("pyspark") is None:
        log.warning("compaction schedule off: pyspark (the lakehouse extra) is not installed")
        return
    worker: asyncio.subprocess.Process | None = None
    try:
        while True:
            if worker is None or worker.returncode is not None:
                if worker is not None:
                    log.warning("compaction worker exited with %s; restarting when there is work", worker.returncode)
                    worker = None
                if await plan_tasks(meta, None, min_bytes=schedule.min_bytes, max_age_seconds=schedule.max_age):
                    worker = await _start(schedule)
            await asyncio.sleep(schedule.interval)
    finally:
        if worker is not None and worker.returncode is None:
            worker.terminate()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(worker.wait(), 30)
            if worker.returncode is None:
                worker.kill()


async def _start(schedule: CompactionSchedule) -> asyncio.subprocess.Process:
    args = [sys.executable, "-m", "nereus.cli", "compact", "--metadata", schedule.metadata_url,
            "--objects", schedule.objects_url, "--interval", str(schedule.interval),
            "--min-bytes", str(schedule.min_bytes), "--max-age", str(schedule.max_age), "--no-progress"]
    log.info("starting the compaction worker (every %.0f s)", schedule.interval)
    return await asyncio.create_subprocess_exec(*args, stdin=asyncio.subprocess.DEVNULL)
