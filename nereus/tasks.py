"""Background tasks whose failures are always heard (never an unretrieved exception)."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger("nereus.tasks")


def log_failure(what: str):
    """A done-callback that retrieves a task's exception and logs it as ``what`` failing."""

    def done(task: asyncio.Future) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s failed: %s", what, exc, exc_info=exc)

    return done


def spawn(coro, what: str, tasks: set | None = None) -> asyncio.Task:
    """Start ``coro`` in the background; its failure is logged, ``tasks`` tracks it while it runs."""
    task = asyncio.ensure_future(coro)
    task.add_done_callback(log_failure(what))
    if tasks is not None:
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    return task


__all__ = ["log_failure", "spawn"]
