"""The cyclic collector in a server: pauses timed into ``nereus_gc_pause_seconds``, survivors of
full collections frozen, cycles among them freed at a thaw or by ``collect_everything``."""

from __future__ import annotations

import gc
import weakref

import pytest

from nereus import cyclic_gc
from nereus.cyclic_gc import (GC_PAUSE_SECONDS, collect_everything, freeze_survivors, stop_freezing,
                              time_collector_pauses)


def _count(generation: str) -> float:
    for metric in GC_PAUSE_SECONDS.collect():
        for sample in metric.samples:
            if sample.name.endswith("_count") and sample.labels == {"generation": generation}:
                return sample.value
    return 0.0


def test_full_and_middle_collections_are_timed_and_the_youngest_are_not():
    time_collector_pauses()
    time_collector_pauses()  # once only
    assert gc.callbacks.count(cyclic_gc._timed) == 1
    full, middle, young = _count("2"), _count("1"), _count("0")
    gc.collect(2)
    gc.collect(1)
    gc.collect(0)
    assert _count("2") >= full + 1 and _count("1") >= middle + 1
    assert _count("0") == young == 0


class Node:
    def __init__(self):
        self.other = self  # a cycle: only the cyclic collector frees it


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    clock = Clock()
    freeze_survivors(clock, thaw_seconds=60.0)
    freeze_survivors(clock, thaw_seconds=60.0)  # once only
    yield clock
    stop_freezing()
    gc.collect()


def test_survivors_of_a_full_collection_are_frozen_and_walked_no_more(clock):
    assert len(cyclic_gc._freezer) == 1
    survivor = Node()
    gc.collect()
    assert gc.get_freeze_count() > 0 and gc.is_tracked(survivor)
    assert not any(o is survivor for o in gc.get_objects(generation=2))  # a full collection skips it
    # Made after the freeze: collected as ever.
    young = weakref.ref(Node())
    gc.collect()
    assert young() is None


def test_a_frozen_cycle_is_freed_at_the_thaw_after_its_interval(clock):
    cycle = Node()
    gone = weakref.ref(cycle)
    gc.collect()
    del cycle  # garbage now, but frozen
    gc.collect()
    assert gone() is not None
    clock.now += 61.0
    gc.collect()  # this one thaws
    assert gc.get_freeze_count() == 0
    gc.collect()  # the next walks everything, frees the cycle and freezes again
    assert gone() is None and gc.get_freeze_count() > 0


def test_collect_everything_frees_frozen_cycles_at_once(clock):
    cycle = Node()
    gone = weakref.ref(cycle)
    gc.collect()
    del cycle
    collect_everything()
    assert gone() is None and gc.get_freeze_count() > 0


def test_stop_freezing_thaws_what_it_froze(clock):
    gc.collect()
    stop_freezing()
    assert gc.get_freeze_count() == 0 and not cyclic_gc._freezer
    gc.collect()
    assert gc.get_freeze_count() == 0
