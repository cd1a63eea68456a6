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
    from nereus.kafka.server.security.quota_store import QuotaStore
    from nereus.kafka.server.security.quotas import PRODUCE, Throttles

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


def test_a_dispatch_rate_relative_to_the_publish_rate_follows_it():
    from nereus.topics.rates import RateMeter

    clock = Clock()
    published = RateMeter(clock)
    policy = {"dispatchThrottlingRateInMsg": 2, "dispatchThrottlingRateInByte": -1, "relativeToPublishRate": True,
              "ratePeriodInSecond": 1}
    limit = dispatch_limit(policy, clock, publish_rates=published.rates)
    limit.take(2, 0)  # nothing published: the configured rate alone
    assert limit.delay() == (0, None)
    limit.take(2, 0)
    assert limit.delay() == (pytest.approx(1.0), "msg")
    clock.now += 1
    published.record(98, 0)  # 98 messages in the meter's first second
    limit.take(50, 0)  # 2 + 98 a second now: 50 more take half a second, not 25
    assert limit.delay() == (pytest.approx(0.5), "msg")
    assert limit.messages.rate == pytest.approx(100)
    clock.now += 20  # publishing stopped: back to the configured rate, one period's burst
    assert limit.delay() == (0, None) and limit.messages.rate == pytest.approx(2)
    assert limit.messages.tokens == pytest.approx(2)
    # Without the flag, the same numbers are an absolute rate.
    absolute = dispatch_limit(dict(policy, relativeToPublishRate=False), clock, publish_rates=published.rates)
    published.record(1000, 0)
    absolute.take(50, 0)
    assert absolute.delay() == (pytest.approx(24.0), "msg")


def test_the_request_quota_throttles_a_second_at_most_and_forgets_older_debt():
    from nereus.kafka.server.security.quota_store import QuotaStore
    from nereus.kafka.server.security.quotas import REQUEST, Throttles

    clock = Clock()
    store = QuotaStore(None, clock=clock)
    store.entries = {(("client-id", "busy"),): {"request_percentage": 10.0}}  # 100 ms of handling a second
    throttles = Throttles(store, clock=clock)
    assert throttles.record(REQUEST, None, "busy", 100) == 0  # one second's share, in one request
    assert throttles.record(REQUEST, None, "busy", 50) == 500
    assert throttles.record(REQUEST, None, "busy", 5000) == 1000  # not 50 s: bounded as in Kafka
    clock.now += 1
    assert throttles.record(REQUEST, None, "busy", 0) == 0
    assert throttles.record(REQUEST, None, "other", 5000) == 0  # no quota for this client
