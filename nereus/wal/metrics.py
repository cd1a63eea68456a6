"""Prometheus metrics of the WAL replicas (registered in the default registry).

Latencies are observed where they happen; what a replica holds is read from the live
stores at scrape time, so it can never drift.
"""

from __future__ import annotations

import weakref

from prometheus_client import REGISTRY, Histogram
from prometheus_client.core import GaugeMetricFamily

_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)

APPEND_SECONDS = Histogram(
    "nereus_wal_append_seconds", "Time of an append to a WAL replica's disk, queueing and fsync included",
    buckets=_LATENCY_BUCKETS,
)
FSYNC_SECONDS = Histogram(
    "nereus_wal_fsync_seconds", "Time of one fdatasync of a WAL replica's segment file", buckets=_LATENCY_BUCKETS,
)

_STORES: weakref.WeakSet = weakref.WeakSet()


def watch(store) -> None:
    """Count ``store`` in the held-bytes, entries and blocks gauges while it lives."""
    _STORES.add(store)


class _HeldCollector:
    def collect(self):
        held_bytes = GaugeMetricFamily("nereus_wal_held_bytes", "Bytes of segment files of the WAL replicas")
        entries = GaugeMetricFamily("nereus_wal_held_entries", "Entries held by the WAL replicas")
        blocks = GaugeMetricFamily("nereus_wal_held_blocks", "Blocks held (with entries, or fenced) by the WAL replicas")
        stores = list(_STORES)
        held_bytes.add_metric([], sum(store.used_bytes() for store in stores))
        entries.add_metric([], sum(store.held_entries() for store in stores))
        blocks.add_metric([], sum(store.held_blocks() for store in stores))
        return [held_bytes, entries, blocks]


REGISTRY.register(_HeldCollector())
