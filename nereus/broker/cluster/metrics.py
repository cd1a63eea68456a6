"""Prometheus metrics of this broker's view of the cluster, computed at scrape time."""

from __future__ import annotations

import logging

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

log = logging.getLogger(__name__)


class ClusterCollector:
    def __init__(self, placement, leases: dict) -> None:
        self.placement = placement
        self.leases = leases

    def collect(self):
        membership = self.placement.membership
        brokers = GaugeMetricFamily("nereus_cluster_brokers", "Live brokers this broker sees", labels=["state"])
        states: dict[str, int] = {}
        for record in list(membership.brokers.values()):
            states[record.state] = states.get(record.state, 0) + 1
        for state, count in sorted(states.items()):
            brokers.add_metric([state], count)
        owned = GaugeMetricFamily("nereus_cluster_owned_topics", "Topics this broker owns")
        owned.add_metric([], len(self.placement.owned))
        handoffs = CounterMetricFamily("nereus_cluster_handoffs", "Topics this broker handed over")
        handoffs.add_metric([], self.placement.handoffs)
        adoptions = CounterMetricFamily("nereus_cluster_adoptions", "Topics adopted from a broker that died")
        adoptions.add_metric([], self.placement.adoptions)
        leases = GaugeMetricFamily("nereus_cluster_lease_held", "1 while this broker runs the worker",
                                   labels=["worker"])
        for worker, holder in sorted(self.leases.items()):
            leases.add_metric([worker], 1 if holder else 0)
        return [brokers, owned, handoffs, adoptions, leases]


def register(placement, leases: dict) -> ClusterCollector | None:
    """Register the collector; None when this process already has one (several in-process brokers in tests)."""
    collector = ClusterCollector(placement, leases)
    try:
        REGISTRY.register(collector)
    except ValueError:
        log.debug("cluster metrics are already registered in this process")
        return None
    return collector


def unregister(collector: ClusterCollector | None) -> None:
    if collector is not None:
        REGISTRY.unregister(collector)
