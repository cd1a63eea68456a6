"""Acknowledgement state of a cursor, in stream offsets.

``acked_below``: every offset below it is acknowledged (Pulsar's mark-delete
position is ``acked_below - 1``). ``ranges``: sorted, disjoint, non-adjacent
half-open ranges ``[start, end)`` of individually acknowledged offsets, all above
``acked_below``. Whenever a range touches ``acked_below`` it is folded into it, so
the representation of a set of acknowledged offsets is unique.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class AckSet:
    acked_below: int = 0
    ranges: list[tuple[int, int]] = field(default_factory=list)

    def is_acked(self, offset: int) -> bool:
        if offset < self.acked_below:
            return True
        i = bisect.bisect_right(self.ranges, (offset, float("inf"))) - 1
        return i >= 0 and self.ranges[i][0] <= offset < self.ranges[i][1]

    def ack(self, start: int, end: int | None = None) -> None:
        """Acknowledge ``[start, end)`` (one offset when ``end`` is None)."""
        end = start + 1 if end is None else end
        start = max(start, self.acked_below)
        if start >= end:
            return
        if start > self.acked_below and (not self.ranges or start > self.ranges[-1][1]):
            # Past everything acked so far (a reader skipping a compacted view's gaps in
            # order): nothing to merge or fold.
            self.ranges.append((start, end))
            return
        # Merge with every range that overlaps or touches [start, end).
        lo = bisect.bisect_left(self.ranges, (start, start))
        if lo > 0 and self.ranges[lo - 1][1] >= start:
            lo -= 1
        hi = lo
        while hi < len(self.ranges) and self.ranges[hi][0] <= end:
            start = min(start, self.ranges[hi][0])
            end = max(end, self.ranges[hi][1])
            hi += 1
        self.ranges[lo:hi] = [(start, end)]
        self._fold()

    def ack_ranges(self, ranges: list[tuple[int, int]]) -> None:
        """Acknowledge each of ``ranges`` (sorted half-open ranges, none overlapping another).

        Ranges past everything acknowledged so far are appended in one pass: a
        ``read_compacted`` reader skips thousands of compacted-away runs a read.
        """
        for i, (start, end) in enumerate(ranges):
            if start > self.acked_below and (not self.ranges or start > self.ranges[-1][1]):
                break
            self.ack(start, end)
        else:
            return
        out = self.ranges
        for start, end in ranges[i:]:
            if out and start <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], end))
            elif start < end:
                out.append((start, end))

    def ack_cumulative(self, upto_inclusive: int) -> None:
        """Acknowledge every offset up to and including ``upto_inclusive``."""
        if upto_inclusive + 1 <= self.acked_below:
            return
        self.acked_below = upto_inclusive + 1
        i = bisect.bisect_left(self.ranges, (self.acked_below, self.acked_below))
        if i > 0 and self.ranges[i - 1][1] > self.acked_below:
            i -= 1
            self.ranges[i] = (self.acked_below, self.ranges[i][1])
        del self.ranges[:i]
        self._fold()

    def reset(self, acked_below: int) -> None:
        """Move the cursor (seek / reset): forget individual acks."""
        self.acked_below = acked_below
        self.ranges = []

    def next_unacked(self, offset: int) -> int:
        """The first unacknowledged offset at or after ``offset``."""
        offset = max(offset, self.acked_below)
        i = bisect.bisect_right(self.ranges, (offset, float("inf"))) - 1
        if i >= 0 and self.ranges[i][0] <= offset < self.ranges[i][1]:
            return self.ranges[i][1]
        return offset

    def acked_count_between(self, start: int, end: int) -> int:
        """How many offsets in ``[start, end)`` are acknowledged."""
        return sum(hi - lo for lo, hi in self.acked_ranges_between(start, end))

    def acked_ranges_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """The acknowledged parts of ``[start, end)``, as sorted half-open ranges."""
        out = []
        if start < min(end, self.acked_below):
            out.append((start, min(end, self.acked_below)))
        # From the last range starting at or before ``start`` to the first starting at ``end``:
        # a cursor with many individual acks must not cost a full scan per call.
        ranges = self.ranges
        for i in range(max(0, bisect.bisect_right(ranges, (start, float("inf"))) - 1), len(ranges)):
            rs, re_ = ranges[i]
            if rs >= end:
                break
            lo, hi = max(rs, start, self.acked_below), min(re_, end)
            if lo < hi:
                out.append((lo, hi))
        return out

    def _fold(self) -> None:
        if self.ranges and self.ranges[0][0] <= self.acked_below:
            self.acked_below = max(self.acked_below, self.ranges[0][1])
            del self.ranges[0]

    def to_json(self) -> dict:
        return {"below": self.acked_below, "ranges": [list(r) for r in self.ranges]}

    @classmethod
    def from_json(cls, value: dict) -> "AckSet":
        return cls(value["below"], [tuple(r) for r in value.get("ranges", [])])
