"""Pulsar-style Prometheus metrics of the Pulsar listener.

A few broker-wide counters are updated on the hot paths; every per-topic series (counts,
rates, clients, backlog, replication) is computed from the loaded topics at scrape time
by a collector, so it can never drift and a loaded topic holds no series of its own. With
more than ``TOPIC_LEVEL_MAX_TOPICS`` topics loaded (or topic-level metrics switched off)
the series are summed by namespace.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ...topics.traffic import KAFKA_READS

REDELIVERED = Counter("pulsar_redelivered_messages", "Entries dispatched again", ["topic", "subscription"])
SEND_ERRORS = Counter("pulsar_send_errors", "SEND commands answered with an error", ["error"])
PROTOCOL_ERRORS = Counter("pulsar_protocol_errors", "Connections closed for a protocol violation", ["reason"])
CONNECTIONS = Counter("pulsar_connections_opened", "Client connections accepted")

#: Loaded topics above which the series are summed by namespace even when topic-level metrics are
#: exposed: a scrape of a million topics' series would take longer than its interval.
TOPIC_LEVEL_MAX_TOPICS = 10_000


@dataclass(frozen=True)
class TopicMetricsLevel:
    """Pulsar's ``exposeTopicLevelMetricsInPrometheus``, bounded: series per topic (label ``topic``)
    while at most ``max_topics`` topics are loaded (0: any number), else per namespace (label
    ``namespace``, Pulsar's form with the switch off)."""

    expose_topics: bool = True
    max_topics: int = TOPIC_LEVEL_MAX_TOPICS

    def per_topic(self, loaded: int) -> bool:
        return self.expose_topics and (self.max_topics <= 0 or loaded <= self.max_topics)


class _Families:
    """Gauges and counters keyed by topic or by namespace; summed when several topics share a key."""

    def __init__(self, per_topic: bool) -> None:
        self.per_topic = per_topic
        self.label = "topic" if per_topic else "namespace"
        self._values: dict[str, dict[tuple, float]] = {}
        self._families: dict[str, tuple[type, str, list[str]]] = {}

    def key(self, name) -> str:
        return str(name) if self.per_topic else name.namespace_name

    def declare(self, kind: type, name: str, doc: str, extra: tuple[str, ...] = ()) -> None:
        self._families[name] = (kind, doc, [self.label, *extra])
        self._values[name] = {}

    def add(self, family: str, labels: tuple, value: float) -> None:
        values = self._values[family]
        values[labels] = values.get(labels, 0.0) + value

    def maximum(self, family: str, labels: tuple, value: float) -> None:
        values = self._values[family]
        values[labels] = max(values.get(labels, value), value)

    def build(self) -> list:
        out = []
        for name, (kind, doc, labels) in self._families.items():
            family = kind(name, doc, labels=labels)
            for values, value in self._values[name].items():
                family.add_metric(list(values), value)
            out.append(family)
        return out


class _Collector:
    def __init__(self, service) -> None:
        self.service = service

    def collect(self):
        registry = self.service.registry
        loaded = [t for t in list(self.service.topics.values()) if t is not None]
        cores = list(registry.topics.values())
        memory = list(registry.memory_topics.values())
        level = getattr(self.service, "topic_metrics", None) or TopicMetricsLevel()
        f = _Families(level.per_topic(len(cores) + len(memory)))
        topics = GaugeMetricFamily("pulsar_topics_count", "Topics loaded by this broker (whichever protocol loaded them)")
        topics.add_metric([], len(cores) + len(memory))
        self._clients(f, loaded)
        self._traffic(f, [*cores, *memory])
        self._replication(f)
        return [topics, *f.build()]

    def _clients(self, f: _Families, loaded) -> None:
        """Producers, consumers, subscriptions and backlog of the loaded Pulsar topics."""
        for name, doc in (("pulsar_producers_count", "Producers connected"),
                          ("pulsar_consumers_count", "Consumers connected"),
                          ("pulsar_subscriptions_count", "Subscriptions"),
                          ("pulsar_msg_backlog", "Unacknowledged messages")):
            f.declare(GaugeMetricFamily, name, doc)
        f.declare(CounterMetricFamily, "pulsar_deduplicated_messages", "SENDs recognised as duplicates")
        if f.per_topic:
            f.declare(GaugeMetricFamily, "pulsar_subscription_back_log", "Unacknowledged messages", ("subscription",))
        for topic in loaded:
            key = (f.key(topic.name),)
            f.add("pulsar_producers_count", key, len(topic.producers))
            f.add("pulsar_consumers_count", key, sum(len(d.sub.consumers) for d in topic.dispatchers.values()))
            f.add("pulsar_subscriptions_count", key, len(topic.dispatchers))
            f.add("pulsar_deduplicated_messages", key, topic.duplicates)
            end = topic.handle.next_offset()
            total = 0
            for sub_name, dispatcher in list(topic.dispatchers.items()):
                value = dispatcher.sub.backlog(end)
                total += value
                if f.per_topic:
                    f.add("pulsar_subscription_back_log", (*key, sub_name), value)
            f.add("pulsar_msg_backlog", key, total)

    def _traffic(self, f: _Families, topics) -> None:
        """Counts and rates of every loaded topic (persistent or not), whichever protocol carries it:
        Kafka reads count as the subscription ``""``."""
        for name, doc in (("pulsar_rate_in", "Messages per second published (Pulsar and Kafka)"),
                          ("pulsar_throughput_in", "Bytes per second published (Pulsar and Kafka)"),
                          ("pulsar_rate_out", "Messages per second delivered (Pulsar and Kafka)"),
                          ("pulsar_throughput_out", "Bytes per second delivered (Pulsar and Kafka)")):
            f.declare(GaugeMetricFamily, name, doc)
        f.declare(CounterMetricFamily, "pulsar_in_messages", "Messages published to the topic (Pulsar and Kafka)")
        f.declare(CounterMetricFamily, "pulsar_in_bytes", "Bytes published to the topic (Pulsar and Kafka)")
        by_sub = ("subscription",) if f.per_topic else ()
        f.declare(CounterMetricFamily, "pulsar_out_messages",
                  "Messages delivered to readers (Kafka reads: subscription \"\")", by_sub)
        f.declare(CounterMetricFamily, "pulsar_out_bytes", "Bytes delivered to readers (Kafka reads: subscription \"\")",
                  by_sub)
        if f.per_topic:
            f.declare(GaugeMetricFamily, "pulsar_subscription_msg_rate_out", "Messages per second delivered",
                      ("subscription",))
            f.declare(GaugeMetricFamily, "pulsar_subscription_msg_throughput_out", "Bytes per second delivered",
                      ("subscription",))
        for topic in topics:
            traffic = topic.traffic
            key = (f.key(topic.name),)
            inbound = traffic.inbound
            rate_in, throughput_in = inbound.rates()
            f.add("pulsar_in_messages", key, inbound.messages)
            f.add("pulsar_in_bytes", key, inbound.bytes)
            rate_out = throughput_out = 0.0
            for sub_name, meter in list(traffic.outbound.items()):
                rate, throughput = meter.rates()
                rate_out += rate
                throughput_out += throughput
                labels = (*key, sub_name) if f.per_topic else key
                f.add("pulsar_out_messages", labels, meter.messages)
                f.add("pulsar_out_bytes", labels, meter.bytes)
                if f.per_topic and sub_name != KAFKA_READS:
                    f.add("pulsar_subscription_msg_rate_out", labels, rate)
                    f.add("pulsar_subscription_msg_throughput_out", labels, throughput)
            for family, value in (("pulsar_rate_in", rate_in), ("pulsar_throughput_in", throughput_in),
                                  ("pulsar_rate_out", rate_out), ("pulsar_throughput_out", throughput_out)):
                f.add(family, key, value)

    def _replication(self, f: _Families) -> None:
        """Each replicator's gauges (Pulsar's ``pulsar_replication_*``), by topic (or namespace) and remote cluster."""
        for name, doc in (("pulsar_replication_rate_out", "Messages per second sent to the remote cluster"),
                          ("pulsar_replication_throughput_out", "Bytes per second sent to the remote cluster"),
                          ("pulsar_replication_backlog", "Messages not yet acknowledged by the remote cluster"),
                          ("pulsar_replication_connected_count", "1 while the replicator's producer is connected"),
                          ("pulsar_replication_delay_in_seconds",
                           "Age of the oldest message sent and not acknowledged")):
            f.declare(GaugeMetricFamily, name, doc, ("remote_cluster",))
        manager = getattr(self.service, "replication", None)
        for core, state in (manager.topics() if manager is not None else ()):
            key = f.key(core.name)
            for remote, replicator in list(state.replicators.items()):
                rate, throughput = replicator.rate.rates()
                labels = (key, remote)
                for family, value in (("pulsar_replication_rate_out", rate),
                                      ("pulsar_replication_throughput_out", throughput),
                                      ("pulsar_replication_backlog", replicator.backlog()),
                                      ("pulsar_replication_connected_count", int(replicator.connected)),
                                      ("pulsar_replication_delay_in_seconds", replicator.delay_seconds())):
                    if family == "pulsar_replication_delay_in_seconds":  # a namespace's: the oldest, not a sum
                        f.maximum(family, labels, value)
                    else:
                        f.add(family, labels, value)


def register(service) -> object:
    collector = _Collector(service)
    REGISTRY.register(collector)
    return collector


def unregister(collector) -> None:
    REGISTRY.unregister(collector)
