"""Background tasks whose failures are always heard (never an unretrieved exception)."""

from __future__ import annotations

import asyncio
import contextlib
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




async def _first_of(a: asyncio.Future, b: asyncio.Future) -> None:
    """Return once ``a`` or ``b`` is done; neither is cancelled nor consumed (so ``b`` needs no
    shield). Leaner than ``asyncio.wait``, and no task: this runs for every Kafka produce."""
    waiter = asyncio.get_running_loop().create_future()

    def wake(_done: asyncio.Future) -> None:
        if not waiter.done():
            waiter.set_result(None)

    a.add_done_callback(wake)
    b.add_done_callback(wake)
    try:
        await waiter
    finally:
        a.remove_done_callback(wake)
        b.remove_done_callback(wake)


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
        await _first_of(work, stop)
    if work.done():
        return True, work.result()
    work.add_done_callback(lambda f: f.cancelled() or f.exception())
    return False, None


async def gather_bounded(func, items, limit: int = 256) -> list:
    """``[await func(item) for item in items]``, at most ``limit`` at a time (metadata reads, say)."""
    gate = asyncio.Semaphore(limit)

    async def one(item):
        async with gate:
            return await func(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


class KeyedLocks:
    """An ``asyncio.Lock`` per key, kept only while someone holds or awaits it: of many objects that
    each need a lock now and then (loaded topics, stream handles), the idle ones keep none."""

    __slots__ = ("_locks",)

    def __init__(self) -> None:
        self._locks: dict[object, list] = {}  # key -> [lock, holders and waiters]

    @contextlib.asynccontextmanager
    async def hold(self, key: object):
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                del self._locks[key]

    def __len__(self) -> int:
        return len(self._locks)


__all__ = ["KeyedLocks", "gather_bounded", "log_failure", "spawn", "unless", "wait_for"]
