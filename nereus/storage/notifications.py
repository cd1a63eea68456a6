"""Tail notifications: the metadata plane tells every process when a stream's tail moves.

Commits made by this process wake its long-polls directly (the WAL writer's
``on_commit``). Commits made by another process only show up in the metadata plane,
so ``TailWatch`` keeps ONE subscription to its change notifications per
``StreamStorage`` and maps the ``tail`` keys of watched streams (streams with
waiters) back to stream ids: a dict lookup per notification, nothing more.

The subscription is taken lazily, when the first stream is watched, and dropped
after ``linger`` seconds without any watched stream (so back-to-back long-polls do
not re-subscribe every time). Notifications carry no values: the owner re-reads
what it needs. Whenever a subscription is (re)established, changes made before it
may have been missed, so ``on_reset`` is called: every waiter re-checks once. A
broken stream is re-subscribed with capped exponential backoff.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Callable

from ..meta import MetadataStore
from ..meta.api import Notification, NotificationType
from ..meta.keys import compare_keys
from . import records

log = logging.getLogger(__name__)

_CHANGED = (NotificationType.KEY_CREATED, NotificationType.KEY_MODIFIED)


class TailWatch:
    """One notification consumer reporting tail changes of the watched streams.

    ``on_change(stream_id)``: the stream's tail was written (a commit, a new session).
    ``on_gone(stream_id)``: its tail was deleted (the stream was deleted).
    ``on_reset()``: a subscription was (re)established; anything may have been missed.
    Callbacks run on the event loop and must not block.
    """

    def __init__(self, meta: MetadataStore, *, on_change: Callable[[int], None],
                 on_gone: Callable[[int], None], on_reset: Callable[[], None],
                 linger: float = 30.0, backoff_start: float = 0.05, backoff_cap: float = 5.0):
        self._meta = meta
        self._on_change = on_change
        self._on_gone = on_gone
        self._on_reset = on_reset
        self._linger = linger
        self._backoff = (backoff_start, backoff_cap)
        self._keys: dict[str, int] = {}  # tail key -> stream id, for the watched streams
        self._task: asyncio.Task[None] | None = None
        self._idle: asyncio.TimerHandle | None = None
        self._live = False
        self._closed = False
        self.subscriptions = 0  # subscriptions established so far (observability, tests)
        self.delivered = 0  # notifications consumed so far

    @property
    def live(self) -> bool:
        """True while a subscription is in place: later tail changes will be reported."""
        return self._live

    def watch(self, stream_id: int) -> None:
        """Report changes of this stream's tail (idempotent); subscribes if needed."""
        self._keys[records.tail_key(stream_id)] = stream_id
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="nereus-tail-watch")
            self._task.add_done_callback(self._finished)

    def unwatch(self, stream_id: int) -> None:
        """Stop reporting this stream; the subscription lingers a while once none is left."""
        self._keys.pop(records.tail_key(stream_id), None)
        if not self._keys and self._task is not None and self._idle is None:
            self._idle = asyncio.get_running_loop().call_later(self._linger, self._stop_if_idle)

    def _stop_if_idle(self) -> None:
        self._idle = None
        if not self._keys and self._task is not None:
            self._task.cancel()

    def _finished(self, task: asyncio.Task[None]) -> None:
        if self._task is task:
            self._task = None
        self._live = False
        if not task.cancelled() and task.exception() is not None:  # retrieved: never silently lost
            log.error("tail notification consumer failed", exc_info=task.exception())
        if self._keys and not self._closed:  # watched again while it was stopping
            self._task = asyncio.get_running_loop().create_task(self._run(), name="nereus-tail-watch")
            self._task.add_done_callback(self._finished)

    async def _run(self) -> None:
        delay = self._backoff[0]
        while True:
            delivered = self.delivered
            try:
                await self._consume()
                log.info("tail notification stream ended; subscribing again")
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a broken stream: the metadata plane restarted, we fell behind...
                log.warning("tail notification stream broke (%s: %s); subscribing again in about %.2fs",
                            type(e).__name__, e, delay)
            finally:
                self._live = False
            if self.delivered > delivered:  # it worked for a while: start backing off afresh
                delay = self._backoff[0]
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._backoff[1])

    async def _consume(self) -> None:
        async with self._meta.notifications() as stream:
            self._live = True
            self.subscriptions += 1
            self._on_reset()
            async for note in stream:
                self.delivered += 1
                self._dispatch(note)

    def _dispatch(self, note: Notification) -> None:
        if note.type in _CHANGED:
            stream_id = self._keys.get(note.key)
            if stream_id is not None:
                self._on_change(stream_id)
        elif note.type is NotificationType.KEY_DELETED:
            stream_id = self._keys.get(note.key)
            if stream_id is not None:
                self._on_gone(stream_id)
        elif note.type is NotificationType.KEY_RANGE_DELETED:
            self._range_deleted(note.key, note.key_range_end)

    def _range_deleted(self, lo: str, hi: str | None) -> None:
        # Rare (stream deletion): a scan of the watched keys is fine here.
        for key, stream_id in list(self._keys.items()):
            if compare_keys(lo, key) <= 0 and (hi is None or compare_keys(key, hi) < 0):
                self._on_gone(stream_id)

    async def close(self) -> None:
        """Drop the subscription for good."""
        self._closed = True
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
