"""Session liveness: clocks, per-shard deadline tables and the expiry sweeper.

A session is created on one shard by a client (``CREATE_SESSION``, persisted with
its timeout) and kept alive by the client's heartbeats, which only move its
deadline in memory. When a deadline passes, the sweeper removes the session from
the table (so further ephemeral writes fail with ``SessionNotFound``) and queues a
``CLOSE_SESSION`` on the shard, which deletes its ephemeral records (with
notifications) in commit order. After a restart every persisted session gets a
fresh deadline of one timeout: renewed by its client or expired, as in Oxia.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable

log = logging.getLogger(__name__)


class Clock:
    """Time source of the engine; inject ``ManualClock`` to test expiry without sleeping."""

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps)."""
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        """Seconds on a monotonic scale (session deadlines)."""
        return time.monotonic()


class ManualClock(Clock):
    """A clock that only moves when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000):
        self._ms = start_ms
        self._mono = 1000.0

    def now_ms(self) -> int:
        return self._ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._ms += int(seconds * 1000)
        self._mono += seconds


class SessionTable:
    """Deadlines of the live sessions of one shard (shared by loop and shard thread)."""

    def __init__(self, clock: Clock):
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[int, tuple[float, float, str]] = {}  # sid -> (timeout s, deadline, identity)

    def opened(self, sid: int, timeout_ms: int, identity: str) -> None:
        timeout = timeout_ms / 1000
        with self._lock:
            self._live[sid] = (timeout, self._clock.monotonic() + timeout, identity)

    def closed(self, sid: int) -> None:
        with self._lock:
            self._live.pop(sid, None)

    def keepalive(self, sid: int) -> bool:
        """Push the deadline one timeout ahead; False if the session is gone."""
        with self._lock:
            entry = self._live.get(sid)
            if entry is None:
                return False
            self._live[sid] = (entry[0], self._clock.monotonic() + entry[0], entry[2])
            return True

    def take_expired(self) -> list[int]:
        """Remove and return the sessions whose deadline has passed."""
        now = self._clock.monotonic()
        with self._lock:
            dead = [sid for sid, (_, deadline, _) in self._live.items() if deadline < now]
            for sid in dead:
                del self._live[sid]
        return dead

    def __contains__(self, sid: int) -> bool:
        return sid in self._live

    def __len__(self) -> int:
        return len(self._live)


class Sweeper:
    """Daemon thread calling ``sweep()`` every ``interval`` seconds until stopped."""

    def __init__(self, sweep: Callable[[], Iterable[object]], interval: float):
        self._sweep = sweep
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="meta-session-sweeper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._sweep()
            except Exception:  # keep sweeping; one bad round must not stop expiry
                log.exception("session sweep failed")

    def stop(self) -> None:
        self._stop.set()
