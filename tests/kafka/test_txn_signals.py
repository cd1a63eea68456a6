"""TxnSignals: a stream's generation changes with every change of its index, with a bounded memory."""

from __future__ import annotations

import asyncio

from nereus.kafka.server.txn.data_path import TxnSignals


def test_a_change_always_gives_a_new_generation_even_after_the_stream_was_forgotten():
    signals = TxnSignals(max_streams=3)
    assert signals.generation(1) == 0
    seen = {}
    for stream in range(1, 50):  # changes of many streams: only the last 3 are kept
        seen[stream] = signals.generation(stream)
        signals.changed(stream)
        assert signals.generation(stream) != seen[stream]
    assert len(signals._stamps) == 3
    captured = {stream: signals.generation(stream) for stream in range(1, 50)}
    for stream in (1, 20, 48, 49):
        signals.changed(stream)
        assert signals.generation(stream) != captured[stream]
    # Streams that did not change may look changed once forgotten (a harmless re-read), never the reverse.
    assert len(signals._stamps) == 3


async def test_a_change_wakes_the_long_polls_of_its_stream():
    signals = TxnSignals(max_streams=1)
    waiting = asyncio.ensure_future(signals.wait(7, timeout=5))
    other = asyncio.ensure_future(signals.wait(8, timeout=0.05))
    await asyncio.sleep(0)
    signals.changed(7)
    assert await waiting is True
    assert await other is False
    assert not signals._waiters
