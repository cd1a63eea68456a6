"""Token buckets for rate policies: Pulsar's publish and dispatch rates, Kafka's quotas.

A bucket fills at ``rate`` tokens a second up to one period's worth (the burst a
client may send at once) and may be overdrawn: what was taken past empty is paid
back by waiting, so the long-run rate is exact even with messages or batches larger
than what is left. The clock is injectable so tests advance time by hand.
"""

from __future__ import annotations

import time
from typing import Callable

_EPSILON = 1e-9  # float residue left after waiting exactly the delay asked for


class TokenBucket:
    """``rate`` tokens per second, holding at most ``rate * period``."""

    __slots__ = ("rate", "capacity", "tokens", "_clock", "_last")

    def __init__(self, rate: float, period: float = 1.0, clock: Callable[[], float] = time.monotonic) -> None:
        if rate <= 0 or period <= 0:
            raise ValueError("the rate and the period must be > 0")
        self.rate = rate
        self.capacity = rate * period
        self.tokens = self.capacity
        self._clock = clock
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        if now > self._last:
            self.tokens = min(self.capacity, self.tokens + (now - self._last) * self.rate)
        self._last = now

    def set_rate(self, rate: float, period: float = 1.0) -> None:
        """Fill at ``rate`` from now on (what was filled so far at the old one is kept)."""
        if rate <= 0:
            raise ValueError("the rate must be > 0")
        self._refill()
        self.rate, self.capacity = rate, rate * period
        self.tokens = min(self.tokens, self.capacity)

    def take(self, amount: float) -> None:
        """Spend ``amount`` tokens, overdrawing the bucket if need be."""
        self._refill()
        self.tokens -= amount

    def delay(self) -> float:
        """Seconds until the bucket is no longer overdrawn (0: go on now)."""
        self._refill()
        return 0.0 if self.tokens >= -_EPSILON else -self.tokens / self.rate


class RateLimit:
    """A messages-per-second and a bytes-per-second bucket (either may be off)."""

    __slots__ = ("messages", "bytes")

    def __init__(self, messages_per_second: float = 0, bytes_per_second: float = 0, *, period: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.messages = TokenBucket(messages_per_second, period, clock) if messages_per_second > 0 else None
        self.bytes = TokenBucket(bytes_per_second, period, clock) if bytes_per_second > 0 else None

    @property
    def enabled(self) -> bool:
        return self.messages is not None or self.bytes is not None

    def take(self, messages: int, size: int) -> None:
        if self.messages is not None:
            self.messages.take(messages)
        if self.bytes is not None:
            self.bytes.take(size)

    def delay(self) -> tuple[float, str | None]:
        """(seconds to wait, which bucket makes it: "msg", "byte" or None when no wait)."""
        by_count = self.messages.delay() if self.messages is not None else 0.0
        by_size = self.bytes.delay() if self.bytes is not None else 0.0
        if by_count <= 0 and by_size <= 0:
            return 0.0, None
        return (by_count, "msg") if by_count >= by_size else (by_size, "byte")


class RelativeRateLimit(RateLimit):
    """A dispatch limit ``relativeToPublishRate`` (PIP-52): the configured rates plus the topic's
    current publish rates, so consumers may always catch up by that much."""

    __slots__ = ("_base", "_period", "_publish_rates")

    def __init__(self, messages_per_second: float, bytes_per_second: float, *,
                 publish_rates: Callable[[], tuple[float, float]], period: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(messages_per_second, bytes_per_second, period=period, clock=clock)
        self._base = (messages_per_second, bytes_per_second)
        self._period = period
        self._publish_rates = publish_rates

    def _follow(self) -> None:
        published = self._publish_rates()
        for bucket, base, rate_in in zip((self.messages, self.bytes), self._base, published):
            if bucket is not None and bucket.rate != base + rate_in:
                bucket.set_rate(base + rate_in, self._period)

    def take(self, messages: int, size: int) -> None:
        self._follow()
        super().take(messages, size)

    def delay(self) -> tuple[float, str | None]:
        self._follow()
        return super().delay()


def publish_limit(policy: dict | None, clock: Callable[[], float] = time.monotonic) -> RateLimit | None:
    """The limit of Pulsar's ``PublishRate`` JSON (values <= 0: off); None when nothing is limited."""
    if not policy:
        return None
    limit = RateLimit(policy.get("publishThrottlingRateInMsg", -1), policy.get("publishThrottlingRateInByte", -1),
                      clock=clock)
    return limit if limit.enabled else None


def dispatch_limit(policy: dict | None, clock: Callable[[], float] = time.monotonic, *,
                   publish_rates: Callable[[], tuple[float, float]] | None = None) -> RateLimit | None:
    """The limit of Pulsar's ``DispatchRate`` JSON (permits per ``ratePeriodInSecond``); None when off.

    With ``relativeToPublishRate``, ``publish_rates()`` (the topic's messages and bytes a
    second) is added to the configured rates as it changes.
    """
    if not policy:
        return None
    period = max(1, int(policy.get("ratePeriodInSecond", 1) or 1))
    rates = (policy.get("dispatchThrottlingRateInMsg", -1) / period, policy.get("dispatchThrottlingRateInByte", -1) / period)
    if policy.get("relativeToPublishRate") and publish_rates is not None:
        limit = RelativeRateLimit(*rates, publish_rates=publish_rates, period=period, clock=clock)
    else:
        limit = RateLimit(*rates, period=period, clock=clock)
    return limit if limit.enabled else None


__all__ = ["RateLimit", "RelativeRateLimit", "TokenBucket", "dispatch_limit", "publish_limit"]
