"""`nereus broker`: one stateless broker over a metadata service and a shared object store.

SIGTERM is a graceful stop that always ends, with exit code 0: the broker hands its
topics over (drain) for at most ``HANDOFF_TIMEOUT`` seconds, then closes what it opened
within ``CLOSE_TIMEOUT``. Both steps talk to the metadata service; when it is gone they
give up (logged once) instead of retrying for the metadata timeout: the broker's
sessions then expire and the other brokers take its topics over as after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys

from ..meta import MetadataError, connect
from ..objstore import open_object_store
from ..tasks import wait_for
from .cluster.origin import warn_if_joining_a_standalone
from .node import BrokerOptions, freeze_startup_objects, start_broker
from .standalone import install_stop_signals, until_stopped

log = logging.getLogger(__name__)

#: Longest a stopping broker spends handing its topics over.
HANDOFF_TIMEOUT = 5.0
#: Longest the closing after the handoff may take once the metadata service proved unreachable.
CLOSE_TIMEOUT = 5.0


async def _hand_over(node) -> bool:
    """Drain the broker; False when the metadata service could not be used (given up)."""
    try:
        await wait_for(node.drain(), HANDOFF_TIMEOUT)
    except TimeoutError:
        log.warning("handoff given up after %g s: metadata service unreachable; topics move when this "
                    "broker's session expires", HANDOFF_TIMEOUT)
        return False
    except MetadataError as exc:
        log.warning("handoff given up: metadata service unreachable (%s); topics move when this broker's "
                    "session expires", exc)
        return False
    return True


async def _close(stack: contextlib.AsyncExitStack) -> None:
    """Close everything without the metadata service: errors are logged, a hang ends the process."""
    closing = asyncio.ensure_future(stack.aclose())
    done, _ = await asyncio.wait({closing}, timeout=CLOSE_TIMEOUT)
    if not done:
        # Cancelling would not bound it (each closer left runs after a cancelled one): stop here.
        log.warning("closing did not finish within %g s without the metadata service; exiting", CLOSE_TIMEOUT)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    exc = closing.exception()
    if isinstance(exc, MetadataError):
        log.info("closed without the metadata service (%s)", exc)
    elif exc is not None:
        raise exc


async def run_broker(metadata_url: str, objects_url: str, options: BrokerOptions, *, session_timeout: float = 10.0,
                     metadata_timeout: float = 30.0, ready: asyncio.Event | None = None) -> None:
    """Run until SIGINT/SIGTERM; then hand the topics over (drain) and stop."""
    freeze_startup_objects()
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
        with contextlib.suppress(MetadataError):  # a check only: the broker serves either way
            await warn_if_joining_a_standalone(meta, metadata_url)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("stopping: handing topics over")
        if not await _hand_over(node):
            await _close(stack)


__all__ = ["run_broker"]
