"""`nereus broker`: one stateless broker over a metadata service and a shared object store."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from ..meta import connect
from ..objstore import open_object_store
from .node import BrokerOptions, start_broker
from .standalone import install_stop_signals, until_stopped

log = logging.getLogger(__name__)


async def run_broker(metadata_url: str, objects_url: str, options: BrokerOptions, *, session_timeout: float = 10.0,
                     metadata_timeout: float = 30.0, ready: asyncio.Event | None = None) -> None:
    """Run until SIGINT/SIGTERM; then hand the topics over (drain) and stop."""
    stop = asyncio.Event()
    install_stop_signals(stop)
    objects = open_object_store(objects_url)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(objects.close)
        meta = connect(metadata_url, identity=f"broker-{options.broker_name or os.getpid()}",
                       session_timeout=session_timeout, retry_timeout=metadata_timeout)
        stack.push_async_callback(meta.close)
        node = await until_stopped(start_broker(stack, meta, objects, objects_url=objects_url,
                                                metadata_url=metadata_url, options=options), stop)
        if node is None:
            return
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("stopping: handing topics over")
        await node.drain()


__all__ = ["run_broker"]
