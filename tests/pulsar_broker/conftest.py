"""Fixtures: a real `nereus standalone` process and official pulsar-client instances."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

NEREUS = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "standalone"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Standalone:
    """One `nereus standalone` process on free ports; restartable on the same data dir."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.http_port = free_port()
        self.pulsar_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log = data_dir.parent / f"{data_dir.name}.log"

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def start(self) -> None:
        args = ["--data-dir", str(self.data_dir), "--http-port", str(self.http_port), "--pulsar-port",
                str(self.pulsar_port), "--kafka-port", str(free_port()), "--oxia-port", str(free_port())]
        self.proc = subprocess.Popen(NEREUS + args, stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"standalone exited early:\n{self.log.read_text()[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.pulsar_port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("the Pulsar port did not open")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.http}/metrics", timeout=5) as response:
            return response.read().decode()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture(scope="session")
def pulsar():
    """The official ``pulsar-client`` package."""
    module = pytest.importorskip("pulsar")
    if not hasattr(module, "Client"):
        pytest.skip("'import pulsar' did not find pulsar-client: run pytest from the repo root")
    return module


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """One standalone shared by a test module (tests use distinct topics)."""
    server = Standalone(tmp_path_factory.mktemp("broker") / "data")
    server.start()
    yield server
    code = server.stop()
    assert code == 0, server.log.read_text()[-3000:]


@pytest.fixture
def fresh_standalone(tmp_path):
    """A standalone of its own (restart tests)."""
    server = Standalone(tmp_path / "data")
    yield server
    server.kill()


@pytest.fixture
def make_client(pulsar):
    clients = []

    def make(url: str, **kw):
        options = dict(operation_timeout_seconds=10, connection_timeout_ms=3000, io_threads=1,
                       message_listener_threads=1, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        options.update(kw)
        client = pulsar.Client(url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        try:
            client.close()
        except Exception:
            pass


@pytest.fixture
def client(standalone, make_client):
    return make_client(standalone.url)


@pytest.fixture
def topic():
    return f"persistent://public/default/t-{uuid.uuid4().hex[:10]}"


def receive_all(consumer, count: int, timeout_ms: int = 10000) -> list:
    out = []
    for _ in range(count):
        out.append(consumer.receive(timeout_millis=timeout_ms))
    return out


def assert_no_more(consumer, pulsar, timeout_ms: int = 500) -> None:
    with pytest.raises(pulsar.Timeout):
        msg = consumer.receive(timeout_millis=timeout_ms)
        raise AssertionError(f"unexpected message {msg.data()!r}")
