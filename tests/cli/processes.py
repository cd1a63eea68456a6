"""Real `nereus` processes for the CLI tests: start, wait for a port, stop, and read a failure's last line."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

NEREUS = [sys.executable, "-m", "nereus.cli"]


def hold_port() -> socket.socket:
    """A listening socket on a free port: the port is in use while it is open."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def fail(args: list[str], timeout: float = 120) -> tuple[int, str, str]:
    """Run a command expected to fail: (exit code, stderr's last line, stderr)."""
    result = subprocess.run(NEREUS + args, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    stderr = result.stderr.decode()
    lines = stderr.strip().splitlines()
    return result.returncode, lines[-1] if lines else "", stderr


def assert_one_line_failure(args: list[str], *expected: str) -> str:
    code, last, stderr = fail(args)
    assert code == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert last.startswith("Error: "), stderr[-3000:]
    for text in expected:
        assert text in last, (text, last)
    return last


class Server:
    """A server process whose stderr goes to a file; started in its own process group."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(NEREUS + args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=open(log, "ab"), start_new_session=True)

    def wait_port(self, port: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"exited early ({self.proc.returncode}):\n{self.text()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"port {port} did not open:\n{self.text()[-3000:]}")

    def wait_text(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged:\n{self.text()[-3000:]}")
            time.sleep(0.1)

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
