"""The cyclic garbage collector's pauses, as a Prometheus histogram.

A broker holds millions of objects once it serves tens of thousands of partitions; a full
collection walks them all and stalls every request for as long as it runs (seconds, at
100,000 loaded partitions). The histogram shows those stalls beside the request latencies
they cause. The youngest generation's collections (thousands a second, microseconds each)
are not recorded.
"""

from __future__ import annotations

import gc
import time

from prometheus_client import Histogram

GC_PAUSE_SECONDS = Histogram(
    "nereus_gc_pause_seconds", "Pauses of the cyclic garbage collector, by the oldest generation collected",
    ["generation"], buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
_BY_GENERATION = {generation: GC_PAUSE_SECONDS.labels(str(generation)) for generation in (1, 2)}
_started = [0.0]


def _timed(phase: str, info: dict) -> None:
    histogram = _BY_GENERATION.get(info["generation"])
    if histogram is None:
        return
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        histogram.observe(time.perf_counter() - _started[0])


def time_collector_pauses() -> None:
    """Record the collector's pauses from now on (once per process; a server's, not a test's)."""
    if _timed not in gc.callbacks:
        gc.callbacks.append(_timed)


__all__ = ["GC_PAUSE_SECONDS", "time_collector_pauses"]
