"""Fixtures: a real `nereus standalone` process and the three Kafka client libraries."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.standalone_process import Standalone, running


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One standalone shared by a test module (tests use distinct topics and groups)."""
    with running(tmp_path_factory.mktemp("kbroker") / "data") as server:
        yield server


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
