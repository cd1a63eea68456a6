"""Notification streams of an Oxia namespace: one GetNotifications stream per shard."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import AsyncIterator

import grpc

from ..api import Notification, NotificationStream
from ..errors import MetadataError, MetadataUnavailable
from ._conn import Backoff, Connection, ShardInfo, error_from_rpc
from . import convert as cv
from .proto import client_pb2 as pb

log = logging.getLogger(__name__)

_END = object()


class OxiaNotificationStream(NotificationStream):
    """Changes on every shard, in per-shard order.

    The subscription is in place once ``async with`` has entered (or the first
    ``__anext__`` started): changes made after that are delivered. The server keeps
    no notification log, so when a shard's stream breaks (server restart, or this
    reader fell ``max_pending`` behind) iteration raises ``MetadataUnavailable``:
    re-read what matters and subscribe again.
    """

    def __init__(self, conn: Connection, max_pending: int = 100_000):
        self._conn = conn
        self._queue: asyncio.Queue = asyncio.Queue(max_pending)
        self._tasks: list[asyncio.Task[None]] = []
        self._ready: asyncio.Future[None] = asyncio.ensure_future(self._start())
        self._closed = False

    async def _start(self) -> None:
        backoff = Backoff()
        deadline = time.monotonic() + self._conn.retry_timeout
        while True:
            try:
                await self._conn.ready()
                shards = list(self._conn.shards)
                started = [asyncio.get_running_loop().create_future() for _ in shards]
                self._tasks = [asyncio.create_task(self._shard(s, f)) for s, f in zip(shards, started)]
                await asyncio.gather(*started)
                return
            except MetadataUnavailable as e:  # the server is not up (yet): try again for a while
                for t in self._tasks:
                    t.cancel()
                if self._conn.closed or time.monotonic() > deadline:
                    raise
                log.debug("subscribing to notifications failed: %s", e)
                await backoff.wait()

    async def _shard(self, shard: ShardInfo, started: asyncio.Future[None]) -> None:
        call = self._conn.stub(shard.leader).GetNotifications(
            pb.NotificationsRequest(shard=shard.id), metadata=self._conn.shard_metadata(shard.id))
        try:
            async for batch in call:
                if not started.done():
                    started.set_result(None)  # the first batch confirms the subscription
                for key, n in batch.notifications.items():
                    await self._queue.put(cv.notification_from_pb(key, n))
            err: MetadataError = MetadataUnavailable(f"notification stream of shard {shard.id} ended")
        except grpc.RpcError as e:
            err = error_from_rpc(e)
        except asyncio.CancelledError:
            call.cancel()
            raise
        if not started.done():
            started.set_exception(err)
        elif not self._closed:
            await self._queue.put(err)

    async def __aenter__(self) -> "OxiaNotificationStream":
        await self._ready
        return self

    def __aiter__(self) -> AsyncIterator[Notification]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Notification]:
        await self._ready
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                await self.close()
                raise item
            yield item

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ready.cancel()
        for t in self._tasks:
            t.cancel()
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(_END)
