"""Token buckets of the rate policies, on a hand-driven clock."""

from __future__ import annotations

import pytest

from nereus.topics.throttle import RateLimit, TokenBucket, dispatch_limit, publish_limit


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_one_period_of_burst_then_makes_the_overdraft_wait():
    clock = Clock()
    bucket = TokenBucket(10, clock=clock)
    bucket.take(10)
    assert bucket.delay() == 0  # exactly spent: not overdrawn
    bucket.take(5)
    assert bucket.delay() == pytest.approx(0.5)
    clock.now += 0.5
    assert bucket.delay() == 0
    clock.now += 100  # a long idle time refills one period's worth, no more
    bucket.take(11)
    assert bucket.delay() == pytest.approx(0.1)


def test_a_limit_waits_for_the_slower_of_its_buckets_and_says_which():
    clock = Clock()
    limit = RateLimit(100, 1000, clock=clock)
    limit.take(1, 3000)
    assert limit.delay() == (pytest.approx(2.0), "byte")
    clock.now += 2
    limit.take(150, 10)
    assert limit.delay() == (pytest.approx(0.5), "msg")
    clock.now += 0.5
    assert limit.delay() == (0.0, None)


def test_pulsar_policies_map_to_limits_and_values_at_or_below_zero_are_off():
    assert publish_limit(None) is None
    assert publish_limit({"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 0}) is None
    limit = publish_limit({"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1})
    assert limit.messages.rate == 5 and limit.bytes is None
    assert dispatch_limit({"dispatchThrottlingRateInMsg": -1, "dispatchThrottlingRateInByte": -1}) is None
    limit = dispatch_limit({"dispatchThrottlingRateInMsg": 20, "dispatchThrottlingRateInByte": 4000,
                            "ratePeriodInSecond": 4})
    assert limit.messages.rate == 5 and limit.messages.capacity == 20
    assert limit.bytes.rate == 1000 and limit.bytes.capacity == 4000


def test_kafka_quota_precedence_and_throttle_times():
    from nereus.kafka.server.quota_store import QuotaStore
    from nereus.kafka.server.quotas import PRODUCE, Throttles

    clock = Clock()
    store = QuotaStore(meta=None, clock=clock)
    store.entries = {
        (("client-id", None),): {PRODUCE: 100.0},
        (("client-id", "app"),): {PRODUCE: 200.0},
        (("user", None),): {PRODUCE: 300.0},
        (("client-id", "app"), ("user", "bob")): {PRODUCE: 400.0},
    }
    assert store.quota(PRODUCE, "bob", "app") == 400.0  # user and client id
    assert store.quota(PRODUCE, "ann", "app") == 300.0  # a user default before any client-id quota
    store.entries.pop((("user", None),))
    assert store.quota(PRODUCE, "ann", "app") == 200.0
    assert store.quota(PRODUCE, None, "other") == 100.0
    assert store.quota("consumer_byte_rate", "bob", "app") is None

    throttles = Throttles(store, clock=clock)
    assert throttles.record(PRODUCE, None, "app", 200) == 0  # one second's burst
    assert throttles.record(PRODUCE, None, "app", 100) == 500
    assert throttles.owed(PRODUCE, None, "app") == 500
    clock.now += 0.5
    assert throttles.owed(PRODUCE, None, "app") == 0
    assert throttles.record("consumer_byte_rate", None, "app", 10**9) == 0  # no quota: never throttled
