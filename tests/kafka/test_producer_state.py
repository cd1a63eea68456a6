"""Idempotent producer state: Kafka's sequence rules, expiry after inactivity, a cap per partition."""

from __future__ import annotations

from nereus.codec.kafka.batch import BatchHeader
from nereus.kafka.server.catalog.producer_state import (DUPLICATE, EXPIRATION_SECONDS, INVALID_EPOCH, MAX_PRODUCERS, NONE,
                                                OUT_OF_ORDER, ProducerStates)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _batch(pid: int, seq: int, count: int = 1, epoch: int = 0) -> BatchHeader:
    return BatchHeader(0, 100, -1, 0, 0, count - 1, 0, 0, pid, epoch, seq, count)


def _produce(states: ProducerStates, batch: BatchHeader, result=None):
    code, original = states.check(batch)
    if code == NONE:
        states.accept(batch, result)
    return code, original


def test_sequence_rules():
    states = ProducerStates(clock=Clock())
    assert _produce(states, _batch(7, 0, 3), 100) == (NONE, None)
    assert _produce(states, _batch(7, 0, 3)) == (DUPLICATE, 100)  # a retry: the original's offset
    assert _produce(states, _batch(7, 5, 1)) == (OUT_OF_ORDER, None)
    assert _produce(states, _batch(7, 3, 2), 103) == (NONE, None)
    assert _produce(states, _batch(7, 1, 1)) == (DUPLICATE, None)  # inside what was written
    assert _produce(states, _batch(7, 0, 1, epoch=1), 105) == (NONE, None)  # a bumped epoch starts over
    assert _produce(states, _batch(7, 5, 1, epoch=0)) == (INVALID_EPOCH, None)


def test_failed_append_can_be_sent_again():
    states = ProducerStates(clock=Clock())
    pending = object()
    _produce(states, _batch(1, 0, 2), 0)
    _produce(states, _batch(1, 2, 2), pending)
    assert states.check(_batch(1, 2, 2)) == (DUPLICATE, pending)
    states.forget_failed(_batch(1, 2, 2), pending)
    assert states.check(_batch(1, 2, 2)) == (NONE, None)


def test_idle_producers_expire():
    clock = Clock()
    states = ProducerStates(expiration_seconds=3600, clock=clock)
    _produce(states, _batch(1, 0), 0)
    _produce(states, _batch(2, 0), 1)
    clock.now += 1800
    _produce(states, _batch(2, 1), 2)
    clock.now += 1801  # producer 1 idle for 3601 s, producer 2 for 1801 s
    assert states.check(_batch(1, 0)) == (NONE, None)  # forgotten: its retry is a new producer's batch
    assert 1 not in states and states.check(_batch(2, 1)) == (DUPLICATE, 2)
    clock.now += 3601
    _produce(states, _batch(3, 0), 3)  # expiry is checked on every accepted batch
    assert len(states) == 1 and 3 in states


def test_default_expiration_is_a_day():
    assert EXPIRATION_SECONDS == 86_400.0
    clock = Clock()
    states = ProducerStates(clock=clock)
    _produce(states, _batch(1, 0), 0)
    clock.now += 86_399
    assert states.check(_batch(1, 0)) == (DUPLICATE, 0)
    clock.now += 2
    assert states.check(_batch(1, 0)) == (NONE, None)


def test_one_hundred_thousand_producers_stay_bounded():
    clock = Clock()
    states = ProducerStates(clock=clock)  # the defaults: one day, MAX_PRODUCERS per partition
    peak = 0
    for pid in range(100_000):
        _produce(states, _batch(pid, 0), pid)
        if pid % 100 == 0:
            _produce(states, _batch(-5 + 10**9, pid // 100), pid)  # one busy producer all along
        peak = max(peak, len(states))
    assert peak == MAX_PRODUCERS
    assert 10**9 - 5 in states  # least recently used are dropped, not the busy one
    assert 0 not in states and 99_999 in states
    clock.now += EXPIRATION_SECONDS + 1
    _produce(states, _batch(123_456_789, 0), 0)
    assert len(states) == 1


def test_restore_is_idempotent_and_keeps_the_newest_epoch():
    states = ProducerStates(clock=Clock())
    for _ in range(2):  # read back twice (a second load after another session wrote)
        states.restore(9, 1, 0, 4, 50)
        states.restore(9, 0, 0, 9, 10)  # an older epoch's batch does not replace the state
    state = states.get(9)
    assert state.epoch == 1 and list(state.batches) == [(0, 4, 50)]
    assert states.check(_batch(9, 5, 1, epoch=1)) == (NONE, None)
