"""Pulsar-style Prometheus metrics of the Pulsar listener.

Counters are updated on the hot paths; the gauges (topics, producers, consumers,
subscriptions, backlog) are computed from the live objects at scrape time by a
collector, so they can never drift.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter
from prometheus_client.core import GaugeMetricFamily

from ...topics.traffic import KAFKA_READS

REDELIVERED = Counter("pulsar_redelivered_messages", "Entries dispatched again", ["topic", "subscription"])
SEND_ERRORS = Counter("pulsar_send_errors", "SEND commands answered with an error", ["error"])
DUPLICATES = Counter("pulsar_deduplicated_messages", "SENDs recognised as duplicates", ["topic"])
PROTOCOL_ERRORS = Counter("pulsar_protocol_errors", "Connections closed for a protocol violation", ["reason"])
CONNECTIONS = Counter("pulsar_connections_opened", "Client connections accepted")


class _Collector:
    def __init__(self, service) -> None:
        self.service = service

    def collect(self):
        topics = GaugeMetricFamily("pulsar_topics_count", "Topics loaded by this broker")
        producers = GaugeMetricFamily("pulsar_producers_count", "Producers connected", labels=["topic"])
        consumers = GaugeMetricFamily("pulsar_consumers_count", "Consumers connected", labels=["topic"])
        subs = GaugeMetricFamily("pulsar_subscriptions_count", "Subscriptions", labels=["topic"])
        backlog = GaugeMetricFamily("pulsar_msg_backlog", "Unacknowledged messages", labels=["topic"])
        sub_backlog = GaugeMetricFamily("pulsar_subscription_back_log", "Unacknowledged messages",
                                        labels=["topic", "subscription"])
        loaded = [t for t in list(self.service.topics.values()) if t is not None]
        topics.add_metric([], len(loaded))
        for topic in loaded:
            name = str(topic.name)
            producers.add_metric([name], len(topic.producers))
            consumers.add_metric([name], sum(len(d.sub.consumers) for d in topic.dispatchers.values()))
            subs.add_metric([name], len(topic.dispatchers))
            end = topic.handle.next_offset()
            total = 0
            for sub_name, dispatcher in topic.dispatchers.items():
                value = dispatcher.sub.backlog(end)
                total += value
                sub_backlog.add_metric([name, sub_name], value)
            backlog.add_metric([name], total)
        return [topics, producers, consumers, subs, backlog, sub_backlog, *self._rates(), *self._replication()]

    def _rates(self):
        """Per-topic rates of every loaded topic, whichever protocol it carries."""
        families = {key: GaugeMetricFamily(key, doc, labels=["topic"]) for key, doc in (
            ("pulsar_rate_in", "Messages per second published (Pulsar and Kafka)"),
            ("pulsar_throughput_in", "Bytes per second published (Pulsar and Kafka)"),
            ("pulsar_rate_out", "Messages per second delivered (Pulsar and Kafka)"),
            ("pulsar_throughput_out", "Bytes per second delivered (Pulsar and Kafka)"))}
        sub_rate = GaugeMetricFamily("pulsar_subscription_msg_rate_out", "Messages per second delivered",
                                     labels=["topic", "subscription"])
        sub_throughput = GaugeMetricFamily("pulsar_subscription_msg_throughput_out", "Bytes per second delivered",
                                           labels=["topic", "subscription"])
        for core in list(self.service.registry.topics.values()):
            name, traffic = str(core.name), core.traffic
            rate_in, throughput_in = traffic.inbound.rates()
            rate_out = throughput_out = 0.0
            for sub_name, meter in list(traffic.outbound.items()):
                rate, throughput = meter.rates()
                rate_out += rate
                throughput_out += throughput
                if sub_name != KAFKA_READS:
                    sub_rate.add_metric([name, sub_name], rate)
                    sub_throughput.add_metric([name, sub_name], throughput)
            for key, value in (("pulsar_rate_in", rate_in), ("pulsar_throughput_in", throughput_in),
                               ("pulsar_rate_out", rate_out), ("pulsar_throughput_out", throughput_out)):
                families[key].add_metric([name], value)
        return [*families.values(), sub_rate, sub_throughput]


    def _replication(self):
        """Each replicator's gauges (Pulsar's ``pulsar_replication_*``), by topic and remote cluster."""
        families = {key: GaugeMetricFamily(key, doc, labels=["topic", "remote_cluster"]) for key, doc in (
            ("pulsar_replication_rate_out", "Messages per second sent to the remote cluster"),
            ("pulsar_replication_throughput_out", "Bytes per second sent to the remote cluster"),
            ("pulsar_replication_backlog", "Messages not yet acknowledged by the remote cluster"),
            ("pulsar_replication_connected_count", "1 while the replicator's producer is connected"),
            ("pulsar_replication_delay_in_seconds", "Age of the oldest message sent and not acknowledged"))}
        manager = getattr(self.service, "replication", None)
        for core, state in (manager.topics() if manager is not None else ()):
            name = str(core.name)
            for remote, replicator in list(state.replicators.items()):
                rate, throughput = replicator.rate.rates()
                for key, value in (("pulsar_replication_rate_out", rate),
                                   ("pulsar_replication_throughput_out", throughput),
                                   ("pulsar_replication_backlog", replicator.backlog()),
                                   ("pulsar_replication_connected_count", int(replicator.connected)),
                                   ("pulsar_replication_delay_in_seconds", replicator.delay_seconds())):
                    families[key].add_metric([name, remote], value)
        return list(families.values())


def register(service) -> object:
    collector = _Collector(service)
    REGISTRY.register(collector)
    return collector


def unregister(collector) -> None:
    REGISTRY.unregister(collector)
