"""Fixtures: one store per backend, and a real moto S3 server process for the s3 leg."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from nereus.objstore import ObjectStore, open_object_store

BUCKET = "nereus-test"
CREDENTIALS = {"region": "us-east-1", "access_key_id": "testing", "secret_access_key": "testing"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except urllib.error.HTTPError:
        return True  # an HTTP error is still an answer
    except OSError:
        return False
    return True


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto S3 server subprocess with bucket ``BUCKET``."""
    log_path = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log_path, "wb") as log:
        # The free port may be taken before moto binds it: retry a few times.
        for _ in range(3):
            port = _free_port()
            endpoint = f"http://127.0.0.1:{port}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + 30
            while proc.poll() is None and time.monotonic() < deadline and not _answers(endpoint + "/moto-api/"):
                time.sleep(0.1)
            if proc.poll() is None and _answers(endpoint + "/moto-api/"):
                break
            proc.kill()
            proc.wait()
        else:
            pytest.fail(f"moto server did not start; log:\n{log_path.read_text()}")
    try:
        # moto accepts unsigned requests, so no SDK is needed to create the bucket.
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT"), timeout=10).close()
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def open_s3(endpoint: str, prefix: str | None = None, **options) -> ObjectStore:
    """An S3 store on the moto bucket under a fresh (or given) prefix."""
    prefix = prefix if prefix is not None else f"t-{uuid.uuid4().hex}"
    return open_object_store(f"s3://{BUCKET}/{prefix}", endpoint=endpoint, **CREDENTIALS, **options)


@pytest.fixture(params=["memory", "file", "s3"])
async def store(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[ObjectStore]:
    """The same contract, once per backend."""
    if request.param == "memory":
        st = open_object_store("memory://")
    elif request.param == "file":
        st = open_object_store(tmp_path.as_uri())
    else:
        # Looked up lazily so that deselecting the s3 leg never starts moto.
        st = open_s3(request.getfixturevalue("moto_endpoint"))
    yield st
    await st.close()


@pytest.fixture
def make_s3(moto_endpoint: str):
    """Factory for S3 stores on the moto bucket: ``make_s3(prefix=None, **options)``."""

    def make(prefix: str | None = None, **options) -> ObjectStore:
        return open_s3(moto_endpoint, prefix, **options)

    return make
