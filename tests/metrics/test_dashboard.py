"""Every metric the Grafana dashboard queries is exported by a standalone after Pulsar and Kafka traffic."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import samples, wait_until

pulsar = pytest.importorskip("pulsar")

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "nereus.json"

_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
             "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels and variables left out)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)  # label lists
    text = re.sub(r"\$\w+", "", text)  # dashboard variables
    text = re.sub(r"\boffset\s+[-\w]+", "", text)  # offset modifiers
    names = set()
    for match in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", text):
        token, rest = match.group(), text[match.end():].lstrip()
        if rest.startswith("(") or token.lower() in _KEYWORDS:
            continue  # a function or an aggregation
        if re.fullmatch(r"\d+(?:\.\d+)?(?:e\d+)?", token):
            continue
        names.add(token)
    return names


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = []

    def walk(panels):
        for panel in panels:
            exprs.extend(t["expr"] for t in panel.get("targets", ()) if t.get("expr"))
            walk(panel.get("panels", ()))

    walk(dashboard["panels"])
    for var in dashboard["templating"]["list"]:
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query or "")
        if match:
            exprs.append(match.group(1))
    return exprs


def test_the_name_extraction_itself():
    expr = ('histogram_quantile(0.99, sum by (api, le) (rate(nereus_kafka_request_seconds_bucket{api="Fetch"}'
            '[$__rate_interval]))) / on (api) group_left sum(x_total offset 5m) and time() - y > 0')
    assert metric_names(expr) == {"nereus_kafka_request_seconds_bucket", "x_total", "y"}


def test_the_dashboard_is_importable():
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert any(v["type"] == "datasource" and v["name"] == "DS_PROMETHEUS" for v in dashboard["templating"]["list"])
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels and all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in panels)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def _traffic(standalone, topic: str, group: str) -> None:
    """Pulsar and Kafka traffic that touches every series the dashboard draws."""
    name = f"persistent://public/default/{topic}"
    client = pulsar.Client(standalone.pulsar_url, operation_timeout_seconds=10, io_threads=1,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(name, "dash", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(name, batching_enabled=False)
        for i in range(10):
            producer.send(b"p-%d" % i)
        for _ in range(5):
            consumer.acknowledge(consumer.receive(timeout_millis=10000))
        producer.close()
    finally:
        client.close()
    kafka_producer = Producer({"bootstrap.servers": standalone.bootstrap})
    for i in range(10):
        kafka_producer.produce(topic, value=b"k-%d" % i)
    assert kafka_producer.flush(20) == 0
    reader = Consumer({"bootstrap.servers": standalone.bootstrap, "group.id": group,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    reader.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 5 and time.monotonic() < deadline:
        msg = reader.poll(0.5)
        got += msg is not None and not msg.error()
    reader.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    reader.close()
    admin = AdminClient({"bootstrap.servers": standalone.bootstrap})
    try:  # an error response: the topic exists
        admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(timeout=10)
    except Exception:
        pass


def test_every_dashboard_metric_is_exported(standalone, topic, group):
    queries = dashboard_queries()
    used = set().union(*(metric_names(q) for q in queries))
    for area in ("pulsar_in_messages_total", "nereus_kafka_request_seconds_bucket", "nereus_kafka_consumer_group_lag",
                 "nereus_storage_wal_flush_bytes_bucket", "nereus_storage_cache_hits_total",
                 "nereus_storage_gc_deleted_objects_total", "nereus_storage_compaction_ranges_total",
                 "nereus_cluster_brokers"):
        assert area in used, f"the dashboard has no panel on {area}"
    _traffic(standalone, topic, group)

    def missing():
        exported = {name for name, _ in samples(standalone)}
        return used - exported

    try:
        wait_until(lambda: not missing(), what="every dashboard metric exported")
    except AssertionError:
        raise AssertionError(f"the dashboard queries metrics /metrics does not export: {sorted(missing())}") from None
