"""Processes the benchmarks start: free ports, a `nereus standalone`, waiting for listeners."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time so far of process ``pid`` (Linux /proc, in clock ticks; None: this process,
    to the nanosecond), all threads."""
    if pid is None:
        return time.process_time()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin_process(pid: int, cpus: set[int]) -> None:
    """Keep every thread of process ``pid`` (and the threads and processes it makes later, which inherit
    the mask) on ``cpus``."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def wait_for(condition, timeout: float, interval: float = 0.1):
    """``condition()``'s first true value, or None after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return None


def status_bytes(pid: int, field: str) -> int:
    """A ``/proc/{pid}/status`` size (``VmRSS``, ``RssAnon``, ...) in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process {proc.args[0]} exited early")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open")


def start_nereus(workdir: Path, extra_args: list[str] | None = None) -> tuple[subprocess.Popen, dict[str, int]]:
    """A standalone on free ports with its data under ``workdir``; returns (process, ports).

    No compaction schedule unless ``extra_args`` ask for one (a Spark worker would
    share the cores with what is measured).
    """
    ports = {n: free_port() for n in ("http", "pulsar", "kafka", "oxia")}
    args = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "standalone", "--data-dir",
            str(workdir / "nereus"), *(extra_args if extra_args is not None else ["--compaction-interval", "0"])]
    for name, port in ports.items():
        args += [f"--{name}-port", str(port)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(workdir / "nereus.log", "ab"))
    for name in ("http", "pulsar", "kafka"):
        wait_port(ports[name], proc)
    return proc, ports
