"""A real `nereus standalone` process on free ports, for end-to-end and failure tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from tests.ports import free_port, port_run

NEREUS = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "standalone"]
LISTENERS = ("http", "pulsar", "kafka", "oxia")


#: ``NEREUS_TEST_WAL_PROFILE=local`` (or ``replicated``): every standalone a test starts without a
#: profile of its own acknowledges writes from its WAL (``make test-wal-profile``).
WAL_PROFILE_ENV = "NEREUS_TEST_WAL_PROFILE"


def wal_profile_args(given: list[str]) -> list[str]:
    profile = os.environ.get(WAL_PROFILE_ENV)
    if not profile or "--wal-profile" in given:
        return []
    quorums = ["--wal-ensemble", "1", "--wal-write-quorum", "1", "--wal-ack-quorum", "1"]
    return ["--wal-profile", profile, *(quorums if profile == "replicated" else [])]


class PortTaken(Exception):
    """Another process bound one of the chosen ports first."""


class Standalone:
    """One standalone process; restartable (also after SIGKILL) on the same data dir and ports.
    ``brokers``: run as ``--brokers N`` (``ports`` are then broker 0's; broker i's are each + i)."""

    def __init__(self, data_dir: Path, extra_args: list[str] | None = None, *, brokers: int = 1) -> None:
        self.data_dir = data_dir
        # No compaction worker unless a test asks for one: it is a Spark process.
        self.extra_args = extra_args if extra_args is not None else ["--compaction-interval", "0"]
        self.brokers = brokers
        self.ports = self._new_ports()
        self.proc: subprocess.Popen | None = None
        self.log = data_dir.parent / f"{data_dir.name}.log"

    @property
    def http_port(self) -> int:
        return self.ports["http"]

    @property
    def pulsar_port(self) -> int:
        return self.ports["pulsar"]

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.pulsar_port}"

    pulsar_url = url

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.ports['kafka']}"

    def start(self, timeout: float = 30.0) -> None:
        """Start and wait until the Pulsar and Kafka listeners accept connections.

        A free port can be taken by another process between ``free_port()`` and the
        bind; the first start then retries on new ports (a restart keeps its ports).
        """
        first_start = self.proc is None
        for attempt in range(3):
            try:
                return self._start_once(timeout)
            except PortTaken:
                if not first_start or attempt == 2:
                    raise
                self.ports = self._new_ports()

    def _new_ports(self) -> dict[str, int]:
        if self.brokers == 1:
            return {name: free_port() for name in LISTENERS}
        # ``--brokers N``: broker i listens on each port + i; the metadata engine's port is one.
        return {name: free_port() if name == "oxia" else port_run(self.brokers) for name in LISTENERS}

    def _start_once(self, timeout: float) -> None:
        args = ["--data-dir", str(self.data_dir), *self.extra_args, *wal_profile_args(self.extra_args)]
        if self.brokers > 1:
            args += ["--brokers", str(self.brokers)]
        for name, port in self.ports.items():
            args += [f"--{name}-port", str(port)]
        log_start = self.log.stat().st_size if self.log.exists() else 0
        self.proc = subprocess.Popen(NEREUS + args, stdout=subprocess.DEVNULL, stderr=open(self.log, "ab"))
        deadline = time.monotonic() + timeout
        waiting = ["pulsar", "kafka"]
        while waiting and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = self.log.read_text()[log_start:]
                if "already in use" in text.lower() or "errno 98" in text.lower():
                    raise PortTaken(text[-500:])
                raise AssertionError(f"standalone exited early:\n{text[-3000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.ports[waiting[0]]), timeout=0.5):
                    waiting.pop(0)
            except OSError:
                time.sleep(0.1)
        if waiting:
            raise AssertionError(f"the {waiting[0]} port did not open:\n{self.log.read_text()[-3000:]}")

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


def admin(node: Standalone, method: str, path: str, body=None) -> None:
    """Call the node's ``/admin/v2`` API; an error status raises (urllib's HTTPError)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{node.http}/admin/v2{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15):
        pass


@contextlib.contextmanager
def running(data_dir: Path, extra_args: list[str] | None = None):
    """A started standalone; on exit it must still be alive and stop cleanly (its log tail says why not)."""
    server = Standalone(data_dir, extra_args)
    server.start()
    yield server
    alive = server.alive()
    code = server.stop()
    assert alive, server.log.read_text()[-3000:]
    assert code == 0, server.log.read_text()[-3000:]
