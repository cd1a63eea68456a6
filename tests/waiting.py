"""Waiting on a condition in tests: poll with a deadline, never sleep for correctness."""

from __future__ import annotations

import time

DEADLINE = 60.0


def wait_until(condition, what: str = "condition", timeout: float | None = None, interval: float = 0.05):
    """Poll ``condition`` until it returns something truthy (returned); AssertionError naming
    ``what`` after ``timeout`` seconds (``DEADLINE``)."""
    timeout = DEADLINE if timeout is None else timeout
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what} (last: {value!r})"
        time.sleep(interval)
