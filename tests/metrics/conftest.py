"""Fixtures: a real `nereus standalone` process, its `/metrics` and topic stats, parsed."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.standalone_fixtures import shared_standalone
from tests.standalone_process import Standalone

# The collector runs often and frees at once, so a deleted topic's objects go within a test.
GC_FLAGS = ["--gc-interval", "0.5", "--gc-grace", "0"]


standalone = shared_standalone("standalone", "metrics", ["--compaction-interval", "0", *GC_FLAGS])


@pytest.fixture
def topic() -> str:
    """A Kafka-style topic name (its Pulsar name: ``pulsar_name(topic)``)."""
    return f"m-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def pulsar_name(topic: str) -> str:
    return f"persistent://public/default/{topic}"


def kafka_stream(topic: str) -> str:
    """The stream of partition 0 of a topic Kafka auto-created (a partitioned topic of one partition)."""
    return f"{pulsar_name(topic)}-partition-0"


def samples(server: Standalone) -> dict[tuple[str, frozenset], float]:
    """Every sample of ``/metrics``: (sample name, its labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(server.metrics()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(server: Standalone, name: str, **labels) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels`` (0 when none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples(server).items() if n == name and wanted <= ls)


def topic_stats(server: Standalone, name: str, *, partitioned: bool = False) -> dict:
    """``.../stats`` (or ``.../partitioned-stats``) of a topic by its full Pulsar name."""
    path = name.replace("persistent://", "persistent/")
    kind = "partitioned-stats" if partitioned else "stats"
    with urllib.request.urlopen(f"{server.http}/admin/v2/{path}/{kind}", timeout=10) as response:
        return json.loads(response.read())


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"{what} not met in {timeout} s (last: {last!r})")
