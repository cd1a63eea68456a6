"""Background tasks: a failure is logged, never left as an unretrieved exception."""

from __future__ import annotations

import asyncio
import gc
import logging

from nereus.tasks import spawn


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
