"""Runs ``nereus oxia`` as a child process for tests (start, SIGKILL, restart)."""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import time
from tests.ports import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ServerProcess:
    """One ``nereus oxia`` process on ``data_dir``; keeps its port across restarts."""

    def __init__(self, data_dir: str, shards: int = 4, port: int | None = None, max_namespaces: int = 100_000):
        self.data_dir = data_dir
        self.shards = shards
        self.max_namespaces = max_namespaces  # tests take a fresh namespace each
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(os.path.dirname(data_dir.rstrip("/")) or ".", f"oxia-{self.port}.log")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        env = dict(os.environ, PYTHONPATH=ROOT)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "oxia", "--data-dir",
                 self.data_dir, "--port", str(self.port), "--shards", str(self.shards),
                 "--max-namespaces", str(self.max_namespaces)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nereus oxia exited with {self.proc.returncode}; see {self.log_path}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nereus oxia did not listen on {self.port} within {timeout}s")

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


_shared: ServerProcess | None = None


def shared_server(tmp_root: str) -> ServerProcess:
    """One server for the whole test session (stopped at exit); tests use their own namespaces."""
    global _shared
    if _shared is None or not _shared.alive():
        _shared = ServerProcess(os.path.join(tmp_root, "oxia-shared"), shards=4).start()
        atexit.register(_shared.stop)
    return _shared
