"""What a WAL writer learns from its recent object puts.

Two decisions follow from how long puts take:

* **How often flushes start, and how many may overlap.** A flush starts every flush
  interval while others are in flight; on a store whose puts take tens of milliseconds,
  a fixed small limit makes appends wait for a slot as well as for the puts ahead of
  theirs. The interval grows to a fraction of the median put time (a commit waits for
  every earlier put, so each overlapping put lengthens the tail of that wait), and the
  limit to the puts in flight that cadence needs (``put median / interval``, plus one),
  between the configured floor and ceiling.
* **When a slow put is raced.** On a remote store (``ObjectStore.hedge_slow_puts``) a
  put still unanswered after the window's ``quantile`` of put times gets a second put
  of the same bytes under another name; the first to land is committed. Slow requests
  to S3 are mostly independent of each other, and AWS advises retrying them for
  latency-sensitive work. At most ``budget`` of the window's flushes are raced, so a
  store that slows down as a whole does not get twice the requests.
"""

from __future__ import annotations

import math
from collections import deque

_RESORT_EVERY = 16  # records between recomputations of the quantile


class PutTiming:
    """Recent put durations of one writer (successful puts only)."""

    def __init__(self, *, hedging: bool, quantile: float = 0.95, budget: float = 0.1, window: int = 256,
                 min_samples: int = 32, hedge_floor: float = 0.005) -> None:
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
        self.hedging = hedging
        self.quantile = quantile
        self.budget = budget
        self.min_samples = min_samples
        self.hedge_floor = hedge_floor
        self._durations: deque[float] = deque(maxlen=window)
        self._raced: deque[bool] = deque(maxlen=window)  # per flush that asked: was it raced?
        self._raced_count = 0
        self._since_sort = 0
        self._median = 0.0
        self._cutoff = math.inf

    def record(self, seconds: float) -> None:
        """One put finished (successfully) after ``seconds``."""
        self._durations.append(seconds)
        self._since_sort += 1
        if self._since_sort >= _RESORT_EVERY or len(self._durations) <= self.min_samples:
            self._resort()

    def _resort(self) -> None:
        self._since_sort = 0
        ordered = sorted(self._durations)
        self._median = ordered[len(ordered) // 2]
        self._cutoff = (ordered[min(len(ordered) - 1, int(len(ordered) * self.quantile))]
                        if len(ordered) >= self.min_samples else math.inf)

    @property
    def median(self) -> float:
        """The window's median put time (0 before any put)."""
        return self._median

    def interval(self, base: float, overlap: int) -> float:
        """The flush interval: ``base``, or the median put time over ``overlap`` when that is longer."""
        return max(base, self._median / overlap)

    def slots(self, interval: float, floor: int, ceiling: int) -> int:
        """Flushes that may be in flight at once, starting one every ``interval`` seconds."""
        if interval <= 0 or self._median <= interval:
            return floor
        return max(floor, min(ceiling, math.ceil(self._median / interval - 1e-9) + 1))

    def hedge_delay(self) -> float | None:
        """How long a flush's put may take before it is raced; None: not raced.

        Each call counts as one flush against the racing budget; ``raced`` marks it raced.
        """
        if not self.hedging or self._cutoff == math.inf:
            return None
        if len(self._raced) == self._raced.maxlen and self._raced[0]:
            self._raced_count -= 1
        self._raced.append(False)
        if self._raced_count >= self.budget * len(self._raced):
            return None
        return max(self.hedge_floor, self._cutoff)

    def raced(self) -> None:
        """A flush that asked ``hedge_delay`` was raced (the latest one not marked yet)."""
        for position in range(len(self._raced) - 1, -1, -1):
            if not self._raced[position]:
                self._raced[position] = True
                self._raced_count += 1
                return
