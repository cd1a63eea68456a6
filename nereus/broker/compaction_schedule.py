"""The broker's compaction schedule: keeps one ``nereus compact --interval`` worker running.

Compaction runs on Spark, in its own process (a JVM has no place in the broker's
event loop): the broker starts the worker the first time some stream has work
(checked cheaply against the offset index), restarts it with a growing delay if it
dies (logging its exit status and the last error it printed), and stops it on
shutdown. The worker keeps one Spark session and compacts every ``interval``
seconds, then syncs the topics' SBT tables.

The worker's output (Spark, JVM and py4j lines, its own log) goes to its log file
(``<data-dir>/logs/compaction.log`` for a standalone), appended, never to the
broker's: the broker logs one line per compaction run that did something, relayed
from the worker's report, and why a worker died.

The worker runs in a session of its own: a Ctrl-C in the broker's terminal reaches
the broker only, which then stops the worker with SIGTERM. A broker that dies without
a word (SIGKILL) takes the worker with it: the worker watches a pipe from the broker
(``nereus.lifeline``), and its Spark JVM watches one from the worker. Compaction is crash-safe
(leases are ephemeral, a half-done switch is finished or undone by the collector),
so the worker needs no shutdown step of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..lakehouse.compaction import IDLE_PAUSE_SECONDS, has_work
from ..lakehouse.java_runtime import ensure_java_home
from ..meta import MetadataStore
from ..tasks import wait_for

log = logging.getLogger(__name__)

#: Longest delay before restarting a worker that keeps dying.
MAX_RESTART_DELAY = 300.0
#: A worker that lived this long was healthy: its death restarts the backoff.
HEALTHY_SECONDS = 600.0
#: How long a stopping worker gets after SIGTERM before SIGKILL.
STOP_TIMEOUT = 30.0
#: Last bytes of the worker's log read to say why it died.
_TAIL_BYTES = 16 << 10
#: The worker's report lines (``nereus compact``'s output), relayed to the broker's log.
_REPORT_LINE = re.compile(r"^(?:compacted \d+ of \d+ range|table \S+: [+]\d+ -\d+ data files)")
#: The worker is not on a terminal: no Spark console progress bars in its log.
_SPARK_SUBMIT_ARGS = "--conf spark.ui.showConsoleProgress=false pyspark-shell"
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b|Error: ).*")
_WORKER_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class CompactionSchedule:
    interval: float  # seconds between runs; 0 disables the schedule
    max_age: float  # compact a stream's last range once its oldest record is this old (seconds)
    min_bytes: int  # ... or once it holds this many bytes
    metadata_url: str
    objects_url: str
    log_file: Path = Path("logs/compaction.log")  # the worker's output, appended
    catalog: str | None = None  # the built-in tables' catalog; None: the worker's default (beside file://), or none


class RestartDelay:
    """Delays before restarting a dying worker: doubling from ``first`` up to ``MAX_RESTART_DELAY``.

    A worker that ran for ``HEALTHY_SECONDS`` before it died starts the sequence again.
    """

    def __init__(self, first: float) -> None:
        self.first = max(first, 1.0)
        self.failures = 0

    def after_exit(self, lived_seconds: float) -> float:
        self.failures = 1 if lived_seconds >= HEALTHY_SECONDS else self.failures + 1
        return min(MAX_RESTART_DELAY, self.first * 2 ** (self.failures - 1))


async def run_schedule(meta: MetadataStore, schedule: CompactionSchedule) -> None:
    """Until cancelled: start the compaction worker once there is work, restart it when it dies."""
    if importlib.util.find_spec("pyspark") is None:
        log.warning("compaction schedule off: pyspark (the lakehouse extra) is not installed")
        return
    delay = RestartDelay(schedule.interval)
    log.info("compaction schedule: every %g s; the worker's output goes to %s", schedule.interval,
             schedule.log_file.resolve())
    while True:
        await _wait_for_work(meta, schedule)
        try:
            worker = await Worker.start(schedule)
        except OSError as exc:  # no interpreter, no processes left, an unwritable log file, ...
            pause = delay.after_exit(0)
            log.warning("cannot start the compaction worker (%s); trying again in %.0f s", exc, pause)
            await asyncio.sleep(pause)
            continue
        try:
            code = await worker.wait()
        finally:
            await worker.stop()  # cancelled (shutdown): SIGTERM, then SIGKILL after STOP_TIMEOUT
        pause = delay.after_exit(worker.lived)
        log.warning("compaction worker exited with %s after %.0f s (%s); restarting in %.0f s", _status(code),
                    worker.lived, worker.reason() or "it printed no error", pause)
        await asyncio.sleep(pause)


async def _wait_for_work(meta: MetadataStore, schedule: CompactionSchedule) -> None:
    """Return once some stream has work; a failing check is logged and tried again next interval.

    While nothing has work the pause doubles up to ``IDLE_PAUSE_SECONDS`` (each check reads
    every stream's index): an idle broker's schedule costs next to nothing."""
    failing = False
    pause = schedule.interval
    while True:
        try:
            if await has_work(meta, min_bytes=schedule.min_bytes, max_age_seconds=schedule.max_age):
                return
            failing = False
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the schedule must outlive any bad stream record or metadata hiccup
            if not failing:  # once per streak, not every interval
                log.exception("compaction schedule: checking the streams for work failed; trying again")
            failing = True
        await asyncio.sleep(pause)
        pause = min(pause * 2, max(schedule.interval, IDLE_PAUSE_SECONDS))


def last_error(output: str) -> str | None:
    """The last error line of a process's output (a traceback's last line, a click error), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if _ERROR_LINE.match(line)]
    return (errors or lines or [None])[-1]


def _status(code: int) -> str:
    return f"signal {-code}" if code < 0 else f"code {code}"


def _worker_log_level() -> str:
    """The broker's log level, for the worker (its command line takes one of ``_WORKER_LEVELS``)."""
    level = logging.getLogger().getEffectiveLevel()
    for name in _WORKER_LEVELS:
        if level <= logging.getLevelName(name):
            return name
    return _WORKER_LEVELS[-1]


class Worker:
    """One ``nereus compact --interval`` process writing to the schedule's log file.

    Its stderr goes straight to the file; its stdout (the run reports) passes through
    the broker, which appends each line to the file and logs the report lines.
    """

    def __init__(self, proc: asyncio.subprocess.Process, log_fd: int, log_start: int) -> None:
        self.proc = proc
        self.started = time.monotonic()
        self.ended: float | None = None
        self._log_fd = log_fd
        self._log_start = log_start
        self._relay = asyncio.ensure_future(self._relay_reports())

    @classmethod
    async def start(cls, schedule: CompactionSchedule) -> "Worker":
        args = [sys.executable, "-m", "nereus.cli", "--lifeline-stdin", "--log-level", _worker_log_level(), "compact",
                "--metadata", schedule.metadata_url, "--objects", schedule.objects_url,
                "--interval", str(schedule.interval), "--min-bytes", str(schedule.min_bytes),
                "--max-age", str(schedule.max_age), "--no-progress",
                "--lock-file", str(schedule.log_file.with_name("compaction.lock"))]
        if schedule.catalog is not None:
            args += ["--catalog", schedule.catalog]
        elif not schedule.objects_url.startswith("file:"):
            args.append("--no-sbt")  # no catalog to keep tables in: compaction alone
        env = dict(os.environ, PYSPARK_SUBMIT_ARGS=_SPARK_SUBMIT_ARGS)
        ensure_java_home(env)
        schedule.log_file.parent.mkdir(parents=True, exist_ok=True)
        log_fd = os.open(schedule.log_file, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            log_start = os.lseek(log_fd, 0, os.SEEK_END)
            # stdin: the worker's lifeline (nereus.lifeline), held open and never written to.
            proc = await asyncio.create_subprocess_exec(*args, stdin=asyncio.subprocess.PIPE,
                                                        stdout=asyncio.subprocess.PIPE, stderr=log_fd, env=env,
                                                        start_new_session=True)
        except BaseException:
            os.close(log_fd)
            raise
        log.info("compaction worker started (pid %d, every %g s)", proc.pid, schedule.interval)
        return cls(proc, log_fd, log_start)

    @property
    def lived(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    async def _relay_reports(self) -> None:
        pending = b""
        while chunk := await self.proc.stdout.read(1 << 16):
            try:
                os.write(self._log_fd, chunk)
            except OSError:  # a full disk must not stop the pipe from draining
                pass
            *lines, pending = (pending + chunk).split(b"\n")
            pending = pending[-_TAIL_BYTES:]
            for line in lines:
                text = line.decode("utf-8", "replace").strip()
                if _REPORT_LINE.match(text):
                    log.info("compaction: %s", text)

    async def wait(self) -> int:
        """The exit status, once the process has exited and its stdout is drained."""
        code = await self.proc.wait()
        self.ended = time.monotonic()
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(asyncio.shield(self._relay), 5)  # a grandchild may hold the pipe
        return code

    def reason(self) -> str | None:
        """The last error line the worker wrote to its log since it started (see ``last_error``)."""
        try:
            end = os.lseek(self._log_fd, 0, os.SEEK_END)
            start = max(self._log_start, end - _TAIL_BYTES)
            tail = os.pread(self._log_fd, end - start, start)
        except OSError:
            return None
        return last_error(tail.decode("utf-8", "replace"))

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL after ``STOP_TIMEOUT``; waits for the exit (also when cancelled)."""
        try:
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.terminate()
                try:
                    await wait_for(asyncio.shield(self.proc.wait()), STOP_TIMEOUT)
                except asyncio.TimeoutError:
                    log.warning("compaction worker ignored SIGTERM for %.0f s; killing it", STOP_TIMEOUT)
                    with contextlib.suppress(ProcessLookupError):
                        self.proc.kill()
                    await asyncio.shield(self.proc.wait())
        finally:
            self._relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._relay  # finished or cancelled: never left pending when the loop closes
            os.close(self._log_fd)
