"""One share-partition (KIP-932): a share group's view of one partition, over a durable cursor.

Rules (what acquisitions and acknowledgements do to a record):

- The share group's subscription on the partition's stream is a durable cursor named
  after the group; what it has acknowledged is delivered for good (Kafka's
  *acknowledged* and *archived* states). Its mark-delete position is the share-partition
  start offset (SPSO); ``fetched_to`` (the first offset never acquired) is the end
  offset (SPEO). Only the in-flight window between them is kept here, in memory.
- ``acquire`` hands a member the records that are available in order: first the
  in-flight ones released or whose lock expired, then new ones. Each acquisition bumps
  the record's delivery count and locks it to the member until ``now + lock``.
- ACCEPT and REJECT acknowledge the record on the cursor (a rejected record is archived,
  never redelivered); GAP (offsets with no record) does as well. RELEASE makes it
  available again. RENEW (KIP-1222, v2 requests) extends the lock by a full duration.
  Only the member holding a record's lock may acknowledge it.
- A released or lock-expired record whose delivery count reached the limit is archived
  (acknowledged on the cursor) instead of being made available.
- Delivery counts and the acquired window are durable, locks are not: ``save_state``
  puts the in-flight records' delivery counts and ``fetched_to`` into a cursor property
  (one write per ShareFetch that acquired records, not one per record); a share-partition
  loaded from the cursor takes them back, its held records available again (those at
  the delivery limit archived, as a lock lost at the limit is).

Sans-I/O: the caller reads the stream, persists the cursor and keeps the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....ledger.cursor import Cursor

GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
ACK_TYPES = (GAP, ACCEPT, RELEASE, REJECT, RENEW)
#: The cursor property holding ``{"to": fetched_to, "counts": [[first, last, count], ...]}``.
STATE_PROPERTY = "kafka.share.state"


class InvalidRecordState(Exception):
    """An acknowledgement for a record the member does not hold (Kafka's INVALID_RECORD_STATE)."""


@dataclass(slots=True)
class InFlight:
    delivery_count: int = 0
    member: str | None = None  # holder of the lock; None: available
    deadline: float = 0.0


class SharePartition:
    """Acquisition state of one share group on one partition."""

    def __init__(self, cursor: Cursor, *, lock_seconds: float, delivery_limit: int, max_in_flight: int = 2000) -> None:
        self.cursor = cursor
        self.lock_seconds = lock_seconds
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self.fetched_to = cursor.acks.acked_below  # SPEO: records at and past it were never acquired
        self.in_flight: dict[int, InFlight] = {}
        self._restore(cursor.properties.get(STATE_PROPERTY))

    def _restore(self, saved: dict | None) -> None:
        if not saved:
            return
        start = self.start_offset
        for first, last, count in saved.get("counts", ()):
            for offset in range(max(first, start), last + 1):
                if self._done(offset):
                    continue
                if count >= self.delivery_limit:
                    self._archive(offset)
                else:
                    self.in_flight[offset] = InFlight(count)
        self.fetched_to = max(self.fetched_to, saved.get("to", 0))

    def save_state(self) -> None:
        """Record the delivery counts and ``fetched_to`` on the cursor (persisted with it)."""
        counts: list[list[int]] = []
        for offset in sorted(self.in_flight):
            count = self.in_flight[offset].delivery_count
            if counts and counts[-1][1] == offset - 1 and counts[-1][2] == count:
                counts[-1][1] = offset
            else:
                counts.append([offset, offset, count])
        self.cursor.set_property(STATE_PROPERTY, {"to": self.fetched_to, "counts": counts})

    @property
    def start_offset(self) -> int:
        """SPSO: every record below it is acknowledged or archived."""
        return self.cursor.acks.acked_below

    def _done(self, offset: int) -> bool:
        return self.cursor.acks.is_acked(offset)

    # -- locks -----------------------------------------------------------------------------
    def expire(self, now: float) -> int:
        """Release the records whose lock ran out; returns how many became available or archived."""
        expired = [o for o, f in self.in_flight.items() if f.member is not None and f.deadline <= now]
        for offset in expired:
            self._release(offset)
        return len(expired)

    def next_deadline(self) -> float | None:
        deadlines = [f.deadline for f in self.in_flight.values() if f.member is not None]
        return min(deadlines) if deadlines else None

    def release_member(self, member: str) -> int:
        """Release every record ``member`` holds (it left, or closed its share session)."""
        held = [o for o, f in self.in_flight.items() if f.member == member]
        for offset in held:
            self._release(offset)
        return len(held)

    def _release(self, offset: int) -> None:
        state = self.in_flight[offset]
        state.member = None
        if state.delivery_count >= self.delivery_limit:
            self._archive(offset)

    def _archive(self, offset: int) -> None:
        self.cursor.ack(offset, offset + 1)
        self.in_flight.pop(offset, None)

    # -- acquisition -------------------------------------------------------------------------
    def first_candidate(self, now: float) -> int:
        """Where a fetch for this share-partition should start reading the stream."""
        self.expire(now)
        self._trim()
        available = [o for o, f in self.in_flight.items() if f.member is None]
        return min(available) if available else max(self.fetched_to, self.start_offset)

    def has_available(self, stream_end: int, now: float) -> bool:
        return self.first_candidate(now) < stream_end

    def acquire(self, member: str, base: int, end: int, budget: int, now: float) -> list[tuple[int, int, int]]:
        """Acquire up to ``budget`` records among offsets ``[base, end)`` (one stored entry).

        Returns ``(first, last, delivery_count)`` ranges, as ShareFetch's AcquiredRecords.
        """
        ranges: list[tuple[int, int, int]] = []
        locked = sum(1 for f in self.in_flight.values() if f.member is not None)
        offset = max(base, self.start_offset)
        while offset < end and budget > 0:
            state = self.in_flight.get(offset)
            fresh = offset >= self.fetched_to
            if self._done(offset) or (state is not None and state.member is not None) or \
                    (state is None and not fresh):
                offset += 1
                continue
            if locked >= self.max_in_flight:
                break
            if state is None:
                state = self.in_flight[offset] = InFlight()
            state.delivery_count += 1
            state.member, state.deadline = member, now + self.lock_seconds
            if fresh:
                self.fetched_to = offset + 1
            if ranges and ranges[-1][1] == offset - 1 and ranges[-1][2] == state.delivery_count:
                ranges[-1] = (ranges[-1][0], offset, state.delivery_count)
            else:
                ranges.append((offset, offset, state.delivery_count))
            budget -= 1
            locked += 1
            offset += 1
        return ranges

    def archive_fresh(self, start: int, end: int) -> None:
        """Offsets ``[start, end)`` hold no deliverable record (transaction markers): archive them."""
        start = max(start, self.fetched_to)
        if start < end:
            self.cursor.ack(start, end)
            self.fetched_to = end

    def skip_to(self, offset: int) -> None:
        """Records below ``offset`` are gone from the stream (retention): nothing to deliver there."""
        if offset > self.start_offset:
            self.cursor.ack(self.start_offset, offset)
        self.fetched_to = max(self.fetched_to, offset)
        self._trim()

    def _trim(self) -> None:
        below = self.start_offset
        for offset in [o for o in self.in_flight if o < below or self._done(o)]:
            del self.in_flight[offset]

    # -- acknowledgement ---------------------------------------------------------------------
    def check(self, member: str, first: int, last: int, types: tuple[int, ...]) -> None:
        """Raise InvalidRecordState unless ``member`` may acknowledge ``[first, last]`` with ``types``."""
        if last < first or len(types) not in (1, last - first + 1) or any(t not in ACK_TYPES for t in types):
            raise InvalidRecordState(f"acknowledgement batch {first}..{last} with {len(types)} types is malformed")
        for offset in range(first, last + 1):
            kind = types[0] if len(types) == 1 else types[offset - first]
            if kind == GAP:
                continue
            state = self.in_flight.get(offset)
            if state is None or state.member != member:
                raise InvalidRecordState(f"offset {offset} is not acquired by member {member}")

    def acknowledge(self, member: str, first: int, last: int, types: tuple[int, ...], now: float = 0.0) -> None:
        """Apply one acknowledgement batch (call ``check`` first); ``now`` dates a RENEW."""
        for offset in range(first, last + 1):
            kind = types[0] if len(types) == 1 else types[offset - first]
            state = self.in_flight.get(offset)
            if kind == RENEW:
                if state is not None and state.member == member:
                    state.deadline = now + self.lock_seconds
            elif kind == RELEASE:
                if state is not None and state.member == member:
                    self._release(offset)
            elif kind == GAP:
                if (state is None and offset < self.fetched_to) or (state is not None and state.member == member):
                    self._archive(offset)
            elif state is not None and state.member == member:  # ACCEPT, REJECT
                self._archive(offset)
        self._trim()


__all__ = ["ACCEPT", "ACK_TYPES", "GAP", "InFlight", "InvalidRecordState", "REJECT", "RELEASE", "RENEW", "STATE_PROPERTY",
           "SharePartition"]
