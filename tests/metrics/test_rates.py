"""RateMeter: counts and windowed rates, on a hand-driven clock."""

from __future__ import annotations

import pytest

from nereus.topics.rates import RateMeter, combined_rates


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_steady_stream_reads_its_rate():
    clock = Clock()
    meter = RateMeter(clock, window=10, buckets=10)
    for _ in range(30):  # 30 s at 5 messages of 100 bytes per second
        meter.record(5, 500)
        clock.now += 1
    assert meter.rates() == pytest.approx((5.0, 500.0))
    assert (meter.messages, meter.bytes, meter.average_size) == (150, 15000, 100.0)


def test_a_young_meter_divides_by_its_age_not_the_window():
    clock = Clock()
    meter = RateMeter(clock, window=10, buckets=10)
    meter.record(4, 40)
    clock.now += 2
    assert meter.rates() == pytest.approx((2.0, 20.0))


def test_traffic_leaves_the_window_and_the_rate_returns_to_zero():
    clock = Clock()
    meter = RateMeter(clock, window=10, buckets=10)
    meter.record(100, 1000)
    clock.now += 5
    assert meter.rates()[0] > 0
    clock.now += 10.5
    assert meter.rates() == (0.0, 0.0)
    assert meter.messages == 100  # counters keep the total


def test_old_buckets_are_dropped_as_new_ones_arrive():
    clock = Clock()
    meter = RateMeter(clock, window=4, buckets=4)
    for _ in range(100):
        meter.record(1, 1)
        clock.now += 1
    assert len(meter._buckets) <= 4


def test_combined_rates_add_up():
    clock = Clock()
    a, b = RateMeter(clock), RateMeter(clock)
    for _ in range(20):
        a.record(1, 10)
        b.record(3, 30)
        clock.now += 1
    assert combined_rates([a, b]) == pytest.approx((4.0, 40.0))


def test_an_empty_window_is_refused():
    with pytest.raises(ValueError):
        RateMeter(window=0)
