"""Fixtures: a real `nereus standalone` process and the three Kafka client libraries."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

NEREUS = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "standalone"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Standalone:
    """One `nereus standalone` on free ports; restartable on the same data dir and ports."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.ports = {name: free_port() for name in ("http", "pulsar", "kafka", "oxia")}
        self.proc: subprocess.Popen | None = None
        self.log = data_dir.parent / f"{data_dir.name}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports['kafka']}"

    @property
    def pulsar_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.ports['pulsar']}"

    def start(self) -> None:
        args = ["--data-dir", str(self.data_dir)]
        for name, port in self.ports.items():
            args += [f"--{name}-port", str(port)]
        self.proc = subprocess.Popen(NEREUS + args, stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"standalone exited early:\n{self.log.read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.ports["kafka"]), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the Kafka port did not open")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One standalone shared by a test module (tests use distinct topics and groups)."""
    server = Standalone(tmp_path_factory.mktemp("kbroker") / "data")
    server.start()
    yield server
    alive = server.alive()
    code = server.stop()
    assert alive, server.log.read_text()[-3000:]
    assert code == 0, server.log.read_text()[-3000:]


@pytest.fixture
def fresh_broker(tmp_path):
    server = Standalone(tmp_path / "data")
    yield server
    server.kill()


@pytest.fixture
def topic() -> str:
    return f"k-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def wait_until(predicate, timeout: float = 20.0, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")
