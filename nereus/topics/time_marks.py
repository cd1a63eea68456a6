"""Feeds a stream's time index (``storage.time_index``) from the entries its writer commits.

Both protocols' entries carry their records' largest timestamp in the entry header
(Kafka: the batch's max timestamp, Pulsar: the publish time), so one writer-side
tracker serves both. The running maximum is rebuilt from the newest mark when the
append session is taken (a scan of at most about ``INTERVAL`` records, which may mean
hundreds of object reads: it runs beside the new writer's first appends, not before
them, and takes the entries they commit meanwhile once it is done); a mark is
written only when the committed entries seen are contiguous, so it never claims
more than it saw.
"""

from __future__ import annotations

import logging

from ..ledger.entry import decode_entry
from ..storage import time_index
from ..tasks import spawn

log = logging.getLogger(__name__)

INTERVAL = 1000  # records between two marks


class TimeMarks:
    """The running max timestamp of one stream's writer, and the marks it leaves."""

    __slots__ = ("meta", "handle", "interval", "max_ts", "end", "since", "_meanwhile")  # one per loaded topic

    def __init__(self, meta, handle, interval: int | None = None) -> None:
        self.meta = meta
        self.handle = handle
        self.interval = interval or INTERVAL
        self.max_ts: int | None = None  # unknown until restored
        self.end = -1  # the offset after the last entry seen
        self.since = 0  # records since the last mark
        # While ``restore`` runs: (base offset, count, max timestamp) of the entries committed.
        self._meanwhile: list[tuple[int, int, int]] | None = None

    async def restore(self) -> None:
        """Rebuild the running maximum from the newest mark to the committed end (then take
        what was committed while it ran)."""
        self.max_ts, self._meanwhile = None, []
        try:
            await self._scan()
        finally:
            meanwhile, self._meanwhile = self._meanwhile, None
        for base, count, max_ts in meanwhile:
            if self.max_ts is None:
                return
            if base + count <= self.end:
                continue  # committed before the scan's end was read: already in the maximum
            self._track(base, count, max_ts)

    async def _scan(self) -> None:
        # A stream created by this handle has no marks but those this tracker writes (it scans
        # from the start then, which finds the same maximum).
        newest = None if self.handle.created else await time_index.last(self.meta, self.handle.stream_id)
        offset, top = newest if newest is not None else (0, -1)
        offset = max(offset, self.handle.start_offset())
        end = self.handle.next_offset()
        seen = 0
        while offset < end:
            result = await self.handle.fetch(offset, end, max_bytes=8 << 20)
            if not result.entries:
                break
            for entry in result.entries:
                top = max(top, decode_entry(entry.data)[0].max_timestamp)
                seen += entry.end_offset - max(entry.base_offset, offset)
            offset = result.entries[-1].end_offset
        self.max_ts, self.end, self.since = top, end, seen

    def committed(self, base_offset: int, count: int, data: bytes) -> None:
        """An entry committed at ``base_offset`` (in commit order)."""
        if self.max_ts is None and self._meanwhile is None:
            return
        try:
            max_ts = decode_entry(data)[0].max_timestamp
        except Exception as exc:  # not an entry this layer wrote: stop marking rather than guess
            log.warning("time marks of stream %d stopped: %s", self.handle.stream_id, exc)
            self.max_ts, self._meanwhile = None, None
            return
        if self._meanwhile is not None:
            self._meanwhile.append((base_offset, count, max_ts))
            return
        self._track(base_offset, count, max_ts)

    def _track(self, base_offset: int, count: int, max_ts: int) -> None:
        if base_offset != self.end:  # a gap: what lies in it is unknown, so the tracker starts over
            self.max_ts = None
            return
        if self.since >= self.interval and self.max_ts >= 0:
            spawn(time_index.mark(self.meta, self.handle.stream_id, base_offset, self.max_ts),
                  f"time mark of stream {self.handle.stream_id}")
            self.since = 0
        self.max_ts = max(self.max_ts, max_ts)
        self.end = base_offset + count
        self.since += count


__all__ = ["INTERVAL", "TimeMarks"]
