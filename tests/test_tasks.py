"""Background tasks: a failure is logged, never left as an unretrieved exception."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

import pytest

from nereus.tasks import spawn, wait_for


async def test_a_failed_background_task_is_logged_and_retrieved(caplog):
    unretrieved = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))

    async def boom():
        raise RuntimeError("disk on fire")

    tasks: set = set()
    with caplog.at_level(logging.ERROR, logger="nereus.tasks"):
        task = spawn(boom(), "the nightly job", tasks)
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)
    assert "the nightly job failed: disk on fire" in caplog.text
    assert not tasks  # forgotten once done
    del task
    gc.collect()
    await asyncio.sleep(0)
    assert not unretrieved


async def _loop_until_cancelled(event: asyncio.Event, wait) -> None:
    while True:
        with contextlib.suppress(TimeoutError):
            await wait(event.wait(), 10)
        event.clear()


@pytest.mark.parametrize("rounds", [50])
async def test_a_cancel_that_meets_a_completed_wait_still_stops_the_loop(rounds):
    """The event fires in the same loop iteration as the cancel: the loop must still end."""
    for _ in range(rounds):
        event = asyncio.Event()
        task = asyncio.ensure_future(_loop_until_cancelled(event, wait_for))
        await asyncio.sleep(0)  # the task now waits on the event
        event.set()
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=10)
        assert done and task.cancelled()


async def test_wait_for_times_out_and_cancels_what_it_waited_on():
    future = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await wait_for(future, 0.01)
    assert future.cancelled()
    assert await wait_for(asyncio.sleep(0, "now"), 5) == "now"


async def test_keyed_locks_exclude_per_key_and_keep_nothing_once_released():
    from nereus.tasks import KeyedLocks

    locks, order = KeyedLocks(), []

    async def use(key: str, tag: str) -> None:
        async with locks.hold(key):
            order.append(f"{tag}+")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            order.append(f"{tag}-")

    await asyncio.gather(use("a", "a1"), use("a", "a2"), use("b", "b1"))
    assert order.index("a1-") < order.index("a2+")  # one key: one at a time
    assert order.index("b1+") < order.index("a1-")  # another key: alongside
    assert len(locks) == 0

    with pytest.raises(RuntimeError):
        async with locks.hold("a"):
            raise RuntimeError("released all the same")
    assert len(locks) == 0
