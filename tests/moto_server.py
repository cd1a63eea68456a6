"""A real moto S3 server process for tests (shared by the object store and cluster tests)."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from tests.ports import free_port

BUCKET = "nereus-test"
CREDENTIALS = {"region": "us-east-1", "access_key_id": "testing", "secret_access_key": "testing"}


def answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True  # an HTTP error is still an answer
    except OSError:
        return False
    return True


class MotoServer:
    """``python -m moto.server`` on a free port with bucket ``BUCKET`` created; ``endpoint`` once started."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.endpoint = ""
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> str:
        with open(self.log_path, "ab") as log:
            # The free port may be taken before moto binds it: retry a few times.
            for _ in range(3):
                port = free_port()
                endpoint = f"http://127.0.0.1:{port}"
                proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                deadline = time.monotonic() + timeout
                while proc.poll() is None and time.monotonic() < deadline and not answers(endpoint + "/moto-api/"):
                    time.sleep(0.1)
                if proc.poll() is None and answers(endpoint + "/moto-api/"):
                    break
                proc.kill()
                proc.wait()
            else:
                raise RuntimeError(f"moto server did not start; log:\n{self.log_path.read_text()}")
        self.proc, self.endpoint = proc, endpoint
        # moto accepts unsigned requests, so no SDK is needed to create the bucket.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT"), timeout=10).close()
        return endpoint

    def stop(self) -> None:
        if self.proc is None:
            return
        terminate(self.proc)
        self.proc = None


def terminate(proc: subprocess.Popen, timeout: float = 10) -> None:
    """SIGTERM, and SIGKILL if the process is still there after ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def serve_for_session(log_path: Path):
    """A generator for session fixtures: yields the endpoint of a started server, stops it after."""
    import pytest

    server = MotoServer(log_path)
    try:
        server.start()
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server.endpoint
    finally:
        server.stop()
