"""Idempotent producers of one partition: sequence checks, bounded in time and in count.

Per producer id: its epoch and the sequence ranges of its last five batches (each
with its base offset, or the pending append that will give it), as Kafka keeps
them, to answer a retried batch with the original's offset and to refuse gaps.

Memory is bounded two ways. A producer with no new batch for
``expiration_seconds`` is forgotten (Kafka's ``producer.id.expiration.ms``, one
day by default), and at most ``max_producers`` are kept, the least recently used
forgotten first. A forgotten producer's next batch is accepted as a new
producer's, as Kafka does after expiry: a retry of a batch from before that is
no longer recognised as a duplicate. Expiry is lazy (checked on every accepted
batch, oldest first), so no timer runs per partition. ``clock`` is monotonic
seconds; tests pass their own.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from typing import Callable

from ....codec.kafka.batch import BatchHeader

KEEP_BATCHES = 5  # Kafka caches this many batches per producer for duplicate detection
EXPIRATION_SECONDS = 86_400.0  # Kafka's producer.id.expiration.ms default: one day
MAX_PRODUCERS = 10_000  # per partition

NONE, OUT_OF_ORDER, DUPLICATE, INVALID_EPOCH = 0, 45, 46, 47


class ProducerState:
    """One producer id's epoch and its last batches ``(first sequence, last sequence, offset or future)``."""

    __slots__ = ("epoch", "batches", "last_used")

    def __init__(self, epoch: int, now: float) -> None:
        self.epoch = epoch
        self.batches: deque = deque(maxlen=KEEP_BATCHES)
        self.last_used = now

    @property
    def last_sequence(self) -> int:
        return self.batches[-1][1] if self.batches else -1


class ProducerStates:
    """The producer states of one partition (see the module docstring for the bounds)."""

    def __init__(self, *, expiration_seconds: float = EXPIRATION_SECONDS, max_producers: int = MAX_PRODUCERS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_producers < 1:
            raise ValueError("max_producers must be at least 1")
        self.expiration_seconds = expiration_seconds
        self.max_producers = max_producers
        self.clock = clock
        self._states: OrderedDict[int, ProducerState] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, producer_id: int) -> bool:
        return producer_id in self._states

    def get(self, producer_id: int) -> ProducerState | None:
        return self._states.get(producer_id)

    def items(self) -> list[tuple[int, ProducerState]]:
        """Every producer id kept, with its state."""
        return list(self._states.items())

    def expire(self, now: float | None = None) -> int:
        """Forget producers idle longer than the expiration; returns how many."""
        now = self.clock() if now is None else now
        count = 0
        while self._states:
            state = next(iter(self._states.values()))
            if now - state.last_used <= self.expiration_seconds:
                break
            self._states.popitem(last=False)
            count += 1
        return count

    def check(self, batch: BatchHeader):
        """(error code, original base offset or future) for a producer's batch; NONE to append."""
        pid = batch.producer_id
        if pid < 0 or batch.base_sequence < 0:
            return NONE, None
        state = self._states.get(pid)
        if state is not None and self.clock() - state.last_used > self.expiration_seconds:
            del self._states[pid]
            state = None
        if state is None:
            return NONE, None  # unknown producer (new, or its state expired): accept
        if batch.producer_epoch < state.epoch:
            return INVALID_EPOCH, None
        if batch.producer_epoch > state.epoch:
            return (NONE, None) if batch.base_sequence == 0 else (OUT_OF_ORDER, None)
        for first, last, original in state.batches:
            if first == batch.base_sequence and last == batch.last_sequence:
                return DUPLICATE, original
        expected = (state.last_sequence + 1) % (1 << 31)
        if batch.base_sequence == expected:
            return NONE, None
        if state.batches and _seq_before(batch.base_sequence, expected):
            return DUPLICATE, None
        return OUT_OF_ORDER, None

    def accept(self, batch: BatchHeader, result) -> None:
        """The batch is being appended: ``result`` is its future (or base offset)."""
        if batch.producer_id < 0 or batch.base_sequence < 0:
            return
        self._record(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence, result)

    def restore(self, producer_id: int, epoch: int, first: int, last: int, base_offset: int) -> None:
        """A stored batch read back at load (a batch already known is not added twice)."""
        state = self._states.get(producer_id)
        if state is not None and state.epoch == epoch and any(b[0] == first and b[1] == last for b in state.batches):
            return
        self._record(producer_id, epoch, first, last, base_offset)

    def _record(self, pid: int, epoch: int, first: int, last: int, result) -> None:
        now = self.clock()
        state = self._states.get(pid)
        if state is None or epoch > state.epoch:
            state = self._states[pid] = ProducerState(epoch, now)
        elif epoch < state.epoch:
            return  # an older epoch's batch (restore only): the newer state stands
        state.batches.append((first, last, result))
        state.last_used = now
        self._states.move_to_end(pid)
        self.expire(now)
        while len(self._states) > self.max_producers:
            self._states.popitem(last=False)

    def forget_failed(self, batch: BatchHeader, result) -> None:
        """An append failed: the producer may send these sequences again."""
        state = self._states.get(batch.producer_id)
        if state is None:
            return
        kept = [b for b in state.batches if b[2] is not result]
        # Later batches of the same producer were accepted after a gap; drop them too.
        cut = next((i for i, b in enumerate(state.batches) if b[2] is result), len(kept))
        state.batches = deque(kept[:cut], maxlen=KEEP_BATCHES)


def _seq_before(seq: int, expected: int) -> bool:
    """seq is below expected in 31-bit wrapping sequence space."""
    return 0 < (expected - seq) % (1 << 31) < (1 << 30)


__all__ = ["DUPLICATE", "EXPIRATION_SECONDS", "INVALID_EPOCH", "KEEP_BATCHES", "MAX_PRODUCERS", "NONE",
           "OUT_OF_ORDER", "ProducerState", "ProducerStates"]
