"""Change notifications of one namespace, fanned out to subscribers.

Each shard thread publishes the notifications of a committed batch once, in commit
order; every subscriber gets them through ONE ``call_soon_threadsafe`` per batch on
its own event loop, so per-shard order is preserved.

Slow subscribers never hold up writes: each subscription buffers at most
``max_pending`` notifications. When a batch would exceed that, the subscription
overflows: its buffer is dropped, it stops receiving, and iterating it raises
``NotificationsOverflow``. The subscriber must then re-read the state it cares
about and subscribe again (as with a broken Oxia notification stream).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import AsyncIterator

from ..api import Notification, NotificationStream
from ..errors import MetadataUnavailable

log = logging.getLogger(__name__)


class NotificationsOverflow(MetadataUnavailable):
    """The subscriber fell more than ``max_pending`` notifications behind; some were lost."""


class NotificationHub:
    """Subscribers of one namespace; ``publish`` is called from shard threads."""

    def __init__(self, max_pending: int):
        self.max_pending = max_pending
        self._subs: tuple[Subscription, ...] = ()  # replaced, never mutated: thread-safe reads

    @property
    def active(self) -> bool:
        return bool(self._subs)

    def subscribe(self, shard: int | None = None) -> "Subscription":
        """Subscribe on the running loop to every shard, or to shard index ``shard`` only."""
        sub = Subscription(self, asyncio.get_running_loop(), self.max_pending, shard)
        self._subs = self._subs + (sub,)
        return sub

    def unsubscribe(self, sub: "Subscription") -> None:
        self._subs = tuple(s for s in self._subs if s is not sub)

    def publish(self, notes: list[Notification], shard: int = 0) -> None:
        for sub in self._subs:
            if sub.shard is not None and sub.shard != shard:
                continue
            try:
                sub.loop.call_soon_threadsafe(sub._push, notes)
            except RuntimeError:  # its loop is closed: nobody will read it any more
                self.unsubscribe(sub)

    def close_all(self) -> None:
        for sub in self._subs:
            try:
                sub.loop.call_soon_threadsafe(sub._end)
            except RuntimeError:
                pass
        self._subs = ()


class Subscription(NotificationStream):
    """A bounded, single-consumer notification stream (runs on one event loop)."""

    def __init__(self, hub: NotificationHub, loop: asyncio.AbstractEventLoop, max_pending: int,
                 shard: int | None = None):
        self._hub = hub
        self.shard = shard
        self.loop = loop
        self._max = max_pending
        self._buf: deque[Notification] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False
        self._overflowed = False

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _push(self, notes: list[Notification]) -> None:
        if self._closed or self._overflowed:
            return
        if len(self._buf) + len(notes) > self._max:
            log.warning("notification subscriber fell %d behind; dropping it", self._max)
            self._overflowed = True
            self._buf.clear()
            self._hub.unsubscribe(self)
        else:
            self._buf.extend(notes)
        self._wake()

    def _end(self) -> None:
        self._closed = True
        self._wake()

    def __aiter__(self) -> AsyncIterator[Notification]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Notification]:
        while True:
            if self._buf:
                yield self._buf.popleft()
            elif self._overflowed:
                raise NotificationsOverflow(f"subscriber fell more than {self._max} notifications behind")
            elif self._closed:
                return
            else:
                self._waiter = self.loop.create_future()
                await self._waiter
                self._waiter = None

    async def next_batch(self, limit: int = 10_000) -> list[Notification]:
        """Wait for notifications and take up to ``limit`` of them; [] once closed."""
        while not self._buf:
            if self._overflowed:
                raise NotificationsOverflow(f"subscriber fell more than {self._max} notifications behind")
            if self._closed:
                return []
            self._waiter = self.loop.create_future()
            await self._waiter
            self._waiter = None
        n = min(limit, len(self._buf))
        return [self._buf.popleft() for _ in range(n)]

    async def close(self) -> None:
        self._hub.unsubscribe(self)
        self._buf.clear()
        self._end()
