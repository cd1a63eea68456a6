"""``GET /admin/v2/brokers/health``: a write and a read through this broker's storage.

Pulsar's health check produces to and consumes from a heartbeat topic of the broker:
it fails when the broker cannot store or serve data, not only when its port is dead.
This one appends a record to the broker's own health stream (not a topic: no client,
table or listing sees it), waits for its commit through the metadata plane and the
object store, reads it back, and trims the stream to that one record.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from aiohttp import web

from .common import AdminError, context

log = logging.getLogger(__name__)

TIMEOUT = 30.0
STREAM = "internal://health/{broker}"  # the "internal" domain: never parsed as a topic name
HANDLES = web.AppKey("nereus_health_streams", dict)


async def check(ctx, handles: dict) -> None:
    """Raise when this broker cannot write and read back a record."""
    refusal = ctx.storage.refusal
    if refusal is not None:
        raise RuntimeError(refusal)
    name = STREAM.format(broker=ctx.placement.local.name)
    stream = handles.get(name)
    if stream is None:
        stream = handles[name] = await ctx.storage.open_stream(name, create=True)
    token = uuid.uuid4().bytes
    try:
        offset = (await stream.append(token, 1)).base_offset
    except Exception:
        handles.pop(name, None)  # fenced or broken: a new handle (and append session) next time
        raise
    fetched = await stream.fetch(offset, offset + 1)
    if not fetched.entries or bytes(fetched.entries[0].data) != token:
        raise RuntimeError(f"the record written at offset {offset} did not read back")
    await stream.trim(offset)


async def get_health(request: web.Request) -> web.Response:
    ctx = context(request)
    try:
        async with asyncio.timeout(TIMEOUT):
            await check(ctx, request.app[HANDLES])
    except AdminError:
        raise
    except Exception as exc:
        log.warning("health check failed: %s", exc)
        raise AdminError(500, f"Health check failed: {exc or type(exc).__name__}") from None
    return web.Response(text="ok")


def register(app: web.Application) -> None:
    app[HANDLES] = {}
    app.router.add_get("/admin/v2/brokers/health", get_health)


__all__ = ["check", "get_health", "register"]
