"""Message and byte counts with their rate over a sliding window.

Each producer, consumer, subscription and topic keeps one ``RateMeter``; topic
stats (``msgRateIn``, ``msgThroughputOut``, ...) and the ``pulsar_rate_*`` gauges
read it. Counts land in one-second buckets of the window, so a rate costs a sum
over a few buckets and never a timer; the clock is injectable so tests can
advance time by hand.
"""

from __future__ import annotations

import time
from typing import Callable

#: Seconds of traffic a rate covers (a meter younger than that: its age, at least one bucket).
WINDOW_SECONDS = 10.0
BUCKETS = 10


class RateMeter:
    """Counts messages and bytes, and their per-second rates over the last ``window`` seconds."""

    __slots__ = ("messages", "bytes", "_clock", "_width", "_buckets", "_born", "_count")

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, window: float = WINDOW_SECONDS,
                 buckets: int = BUCKETS) -> None:
        if window <= 0 or buckets <= 0:
            raise ValueError("window and buckets must be positive")
        self.messages = 0
        self.bytes = 0
        self._clock = clock
        self._width = window / buckets
        self._count = buckets
        # [bucket index, messages, bytes], oldest first; a list, not a deque: at most ``buckets``
        # long, and an idle meter (one per loaded topic) costs a few bytes instead of a deque's block.
        self._buckets: list[list] = []
        self._born = clock()

    def record(self, messages: int, size: int) -> None:
        """Count ``messages`` messages of ``size`` bytes in all, now."""
        self.messages += messages
        self.bytes += size
        index = int(self._clock() // self._width)
        if self._buckets and self._buckets[-1][0] == index:
            bucket = self._buckets[-1]
            bucket[1] += messages
            bucket[2] += size
        else:
            self._buckets.append([index, messages, size])
            while self._buckets[0][0] <= index - self._count:
                del self._buckets[0]

    @property
    def quiet(self) -> bool:
        """Nothing counted since ``rates`` last found the window empty: its rates are zero."""
        return not self._buckets

    def rates(self) -> tuple[float, float]:
        """(messages per second, bytes per second) over the window."""
        now = self._clock()
        first = int(now // self._width) - self._count + 1  # oldest bucket still in the window
        messages = size = 0
        for index, m, b in self._buckets:
            if index >= first:
                messages += m
                size += b
        if not messages and not size:
            if self._buckets and self._buckets[-1][0] < first:
                self._buckets = []  # all out of the window: an idle meter keeps nothing
            return 0.0, 0.0
        since = max(first * self._width, self._born)
        span = max(now - since, self._width)
        return messages / span, size / span

    @property
    def average_size(self) -> float:
        """Mean bytes per message since the meter started."""
        return self.bytes / self.messages if self.messages else 0.0


def combined_rates(meters) -> tuple[float, float]:
    """The summed rates of several meters."""
    messages = size = 0.0
    for meter in meters:
        m, b = meter.rates()
        messages += m
        size += b
    return messages, size
