"""The cyclic collector's pauses are timed into ``nereus_gc_pause_seconds`` (full ones included)."""

from __future__ import annotations

import gc

from nereus.broker import collector_pauses
from nereus.broker.collector_pauses import GC_PAUSE_SECONDS, time_collector_pauses


def _count(generation: str) -> float:
    for metric in GC_PAUSE_SECONDS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.labels == {"generation": generation}:
                return sample.value
    return 0.0


def test_full_and_middle_collections_are_timed_and_the_youngest_are_not():
    time_collector_pauses()
    time_collector_pauses()  # once only
    assert gc.callbacks.count(collector_pauses._timed) == 1
    full, middle, young = _count("2"), _count("1"), _count("0")
    gc.collect(2)
    gc.collect(1)
    gc.collect(0)
    assert _count("2") >= full + 1 and _count("1") >= middle + 1
    assert _count("0") == young == 0
