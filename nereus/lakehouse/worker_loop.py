"""One event loop per Spark Python worker process, kept open across tasks."""

from __future__ import annotations

import asyncio

_loop: asyncio.AbstractEventLoop | None = None


def worker_loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for metadata and object store calls, kept open.

    Spark reuses its Python workers for many tasks; a loop per task, closed after it,
    breaks the Oxia client's gRPC channels (grpc.aio binds to the first loop it sees)
    and made its poller log errors for late events of channels it had closed.
    """
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop


def run_async(coro):
    """Run ``coro`` to completion on ``worker_loop()`` (Spark calls Python code synchronously)."""
    return worker_loop().run_until_complete(coro)
