"""Above a number of loaded topics, or with topic-level metrics switched off, per-topic series are
summed per namespace (Pulsar's ``exposeTopicLevelMetricsInPrometheus``), so a scrape stays small."""

from __future__ import annotations

import uuid

import pytest

from tests.standalone_process import admin, running

from .conftest import samples, wait_until

pulsar = pytest.importorskip("pulsar")


def publish(url: str, topics: list[str], count: int) -> None:
    client = pulsar.Client(url, operation_timeout_seconds=10, io_threads=1,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        for topic in topics:
            producer = client.create_producer(topic)
            for i in range(count):
                producer.send(b"m%d" % i)
            producer.close()
    finally:
        client.close()


def series(server, name: str) -> dict[frozenset, float]:
    return {labels: v for (n, labels), v in samples(server).items() if n == name}


@pytest.mark.parametrize("flags", [["--topic-level-metrics-max-topics", "2"], ["--no-expose-topic-level-metrics"]],
                         ids=["above-the-limit", "switched-off"])
def test_series_are_summed_per_namespace(tmp_path, flags):
    tag = uuid.uuid4().hex[:8]
    with running(tmp_path / "data", ["--compaction-interval", "0", *flags]) as server:
        admin(server, "PUT", f"/namespaces/public/ns-{tag}")
        topics = [f"persistent://public/default/a-{tag}", f"persistent://public/default/b-{tag}",
                  f"persistent://public/ns-{tag}/c"]
        publish(server.pulsar_url, topics, 3)
        wanted = {frozenset({("namespace", "public/default")}): 6.0,
                  frozenset({("namespace", f"public/ns-{tag}")}): 3.0}
        wait_until(lambda: series(server, "pulsar_in_messages_total") == wanted, timeout=30,
                   what="pulsar_in_messages_total summed per namespace")
        assert not any(("topic", t) in labels for (_, labels) in samples(server) for t in topics)
        assert set(series(server, "pulsar_producers_count")) == set(wanted)


def test_topic_level_series_at_or_below_the_limit(tmp_path):
    with running(tmp_path / "data", ["--compaction-interval", "0", "--topic-level-metrics-max-topics", "2"]) as server:
        topics = ["persistent://public/default/one", "persistent://public/default/two"]
        publish(server.pulsar_url, topics, 2)
        wait_until(lambda: series(server, "pulsar_in_messages_total")
                   == {frozenset({("topic", t)}): 2.0 for t in topics}, timeout=30, what="per-topic series")
