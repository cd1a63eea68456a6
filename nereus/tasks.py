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


async def wait_for(aw, timeout: float | None):
    """``asyncio.wait_for`` that never loses a cancellation.

    Python 3.11's ``asyncio.wait_for`` returns the result instead of raising when the
    awaited thing completes in the same loop iteration as the cancellation of the task
    waiting on it: a loop like ``while True: await wait_for(event.wait(), t)`` then never
    stops. ``asyncio.timeout`` counts cancellations properly. Raises ``TimeoutError``.
    """
    async with asyncio.timeout(timeout):
        return await aw




async def unless(work, stop: asyncio.Future | asyncio.Event) -> tuple[bool, object]:
    """Wait for ``work`` (a future or coroutine) or ``stop`` (a future, or an event being set),
    whichever comes first.

    ``(True, result)`` when ``work`` finished (its exception raised here), ``(False, None)``
    when ``stop`` came first: ``work`` goes on in the background and its outcome is
    retrieved there (nobody waits for it any more). ``stop`` itself is left alone.
    """
    work = asyncio.ensure_future(work)
    if isinstance(stop, asyncio.Event):
        if not work.done() and not stop.is_set():
            waiter = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait((work, waiter), return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
    elif not work.done() and not stop.done():
        # asyncio.wait neither cancels nor consumes what it waits for: ``stop`` needs no shield
        # (and a future costs no task, which matters on paths such as every Kafka produce).
        await asyncio.wait((work, stop), return_when=asyncio.FIRST_COMPLETED)
    if work.done():
        return True, work.result()
    work.add_done_callback(lambda f: f.cancelled() or f.exception())
    return False, None


__all__ = ["log_failure", "spawn", "unless", "wait_for"]
