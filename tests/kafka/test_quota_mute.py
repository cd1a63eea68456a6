"""A connection muted by a quota reads again once the mute is over, however the clock's
reads fall around the mute's end (timers fire a little early or late)."""

from __future__ import annotations

import asyncio

from nereus.kafka.server.wire.connection import KafkaConnection
from nereus.net_limits import ConnectionLimits, PendingBudget
from tests.limits.test_pending_budget import Service, Transport


class SteppedClock:
    """Gives its readings in turn, then the last one for ever."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def __call__(self) -> float:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


async def test_a_mute_that_ends_between_two_clock_readings_still_resumes_reading():
    service = Service(ConnectionLimits(max_pending_bytes=1 << 20, protocol="kafka", budget=PendingBudget(1 << 20)))
    conn, transport = KafkaConnection(service), Transport(1)
    # The mute starts at 100.0 for 50 ms. The serve loop sleeps, wakes just before the end
    # (99.999 + 0.050), and the end passes before its next reading.
    conn.clock = SteppedClock(100.0, 100.0, 100.049, 100.05)
    conn.connection_made(transport)
    conn.mute(50)
    assert not transport.reading
    try:
        for _ in range(200):
            if transport.reading:
                break
            await asyncio.sleep(0.01)
        assert transport.reading, "the connection stayed muted after its throttle time"
    finally:
        conn.connection_lost(None)
