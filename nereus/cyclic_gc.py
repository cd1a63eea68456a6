"""The cyclic garbage collector in a server process: its pauses timed, its survivors frozen.

A broker holds millions of objects once it serves tens of thousands of partitions. CPython
runs a full collection whenever the objects promoted to the oldest generation since the last
one reach a quarter of those that survived it, and a full collection walks every tracked
object: a stall of every request of ~1 s at 40,000 loaded partitions, every few seconds while
large answers (a Kafka Metadata request for every topic) promote their temporaries.

So a server freezes what survives each full collection (``gc.freeze``): the next one walks only
what is new since. Frozen objects are still freed by reference counting; only cycles among them
wait, so the frozen set is thawed every ``THAW_SECONDS`` (the full collection after that walks
everything once and frees such cycles) and when many topics are unloaded at once
(``collect_everything``), where their memory is to go back to the OS.

The youngest generation's collections (thousands a second, microseconds each) are not timed.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

from prometheus_client import Histogram

GC_PAUSE_SECONDS = Histogram(
    "nereus_gc_pause_seconds", "Pauses of the cyclic garbage collector, by the oldest generation collected",
    ["generation"], buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
_BY_GENERATION = {generation: GC_PAUSE_SECONDS.labels(str(generation)) for generation in (1, 2)}
_started = [0.0]

#: Longest time survivors stay frozen: cycles formed among them since are freed this late at most.
THAW_SECONDS = 600.0
OLDEST = 2


def _timed(phase: str, info: dict) -> None:
    histogram = _BY_GENERATION.get(info["generation"])
    if histogram is None:
        return
    if phase == "start":
        _started[0] = time.perf_counter()
    else:
        histogram.observe(time.perf_counter() - _started[0])


class _SurvivorFreezer:
    """A ``gc.callbacks`` entry freezing the survivors of every full collection."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, thaw_seconds: float = THAW_SECONDS):
        self.clock = clock
        self.thaw_seconds = thaw_seconds
        self.thawed_at = clock()

    def __call__(self, phase: str, info: dict) -> None:
        if phase != "stop" or info["generation"] != OLDEST:
            return
        # At the end of a full collection the younger generations are empty: what is tracked
        # now is exactly the survivors.
        now = self.clock()
        if now - self.thawed_at >= self.thaw_seconds:
            gc.unfreeze()  # the next full collection walks everything once, then freezes again
            self.thawed_at = now
        else:
            gc.freeze()


_freezer: list[_SurvivorFreezer] = []


def time_collector_pauses() -> None:
    """Record the collector's pauses from now on (once per process; a server's, not a test's)."""
    if _timed not in gc.callbacks:
        gc.callbacks.append(_timed)


def freeze_survivors(clock: Callable[[], float] = time.monotonic, thaw_seconds: float = THAW_SECONDS) -> None:
    """From now on freeze what survives each full collection (once per process; a server's:
    cycles among frozen objects wait up to ``thaw_seconds`` to be freed)."""
    if not _freezer:
        _freezer.append(_SurvivorFreezer(clock, thaw_seconds))
        gc.callbacks.append(_freezer[0])


def stop_freezing() -> None:
    """Undo ``freeze_survivors`` and thaw what it froze."""
    while _freezer:
        gc.callbacks.remove(_freezer.pop())
    gc.unfreeze()


def collect_everything() -> int:
    """Thaw and run a full collection (after a large unload: the unloaded objects' cycles are
    freed now, not at the next thaw); the survivors are frozen again where freezing is on."""
    if _freezer:
        gc.unfreeze()
        _freezer[0].thawed_at = _freezer[0].clock()
    return gc.collect()


__all__ = ["GC_PAUSE_SECONDS", "THAW_SECONDS", "collect_everything", "freeze_survivors", "stop_freezing",
           "time_collector_pauses"]
