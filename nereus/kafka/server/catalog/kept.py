"""Answers kept between requests while every change to what they were read from is heard.

Kafka brokers answer Metadata from a cache that the controller's changes update; here a
broker keeps what it read (the namespace's listing, replica layouts) and hears each change
notification under the followed prefixes, from any broker, and the changes it makes itself.
A change names its topic, so a kept answer is patched: only the topics changed since it was
read are read again (a change that names no topic, or too many changed topics, and the answer
is read whole). Answers named ``keep_current`` are patched in the background shortly after
changes, so a request finds them ready. While the notification stream is down (or before it is
followed), nothing is kept: a change could go unheard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

from ....meta.api import NotificationType

log = logging.getLogger(__name__)

#: Topics changed since an answer was read above which it is read whole rather than patched.
MAX_PATCHED = 2_000
#: Seconds between background patches of the answers kept current: the changes of a burst
#: (a client creating topics one after another) go into one patch.
KEEP_UP_SECONDS = 0.25
_RETRY_SECONDS = 5.0  # after a failed background reading

Read = Callable[[], Awaitable]
Patch = Callable[[object, list[str]], Awaitable]  # (kept answer, changed topics) -> the answer now


@dataclass(frozen=True, slots=True)
class _Kept:
    subscriptions: int  # the notification subscription it was read under
    seen: int  # changes heard before it was read: it reflects each of them
    answer: object


class KeptAnswers:
    """Named answers, each reused until a change is heard, then patched (or read again); concurrent
    askers share one reading."""

    def __init__(self) -> None:
        self._membership = None
        self.changes = 0  # changes heard (or made here)
        self._whole = 0  # the last change that named no topic: answers read before it are read again
        self._touched: dict[str, int] = {}  # topic -> the last change to it
        self._kept: dict[str, _Kept] = {}
        self._reading: dict[str, tuple[tuple[int, int], asyncio.Future]] = {}
        self._current: dict[str, tuple[Read, Patch | None]] = {}  # name -> how to read and patch it
        self._keeping_up: asyncio.Task | None = None
        self.keep_up_seconds = KEEP_UP_SECONDS

    def keep_current(self, name: str, read: Read, patch: Patch | None = None) -> None:
        """From now on keep ``name`` read, and patch it in the background after changes (as a Kafka
        broker keeps its metadata cache), so requests do not wait for the reading."""
        if name not in self._current:
            self._current[name] = (read, patch)
            self._keep_up()

    def _keep_up(self) -> None:
        if self._membership is None:
            return  # nothing is kept before the notifications are followed (``follow`` starts it)
        if self._current and (self._keeping_up is None or self._keeping_up.done()):
            self._keeping_up = asyncio.get_running_loop().create_task(self._keeping())

    async def _keeping(self) -> None:
        delay = self.keep_up_seconds
        while True:
            await asyncio.sleep(delay)
            if self._subscriptions() is None:
                continue  # nothing can be kept until the notification stream is followed again
            before = (self.changes, self._subscriptions())
            delay = self.keep_up_seconds
            for name, (read, patch) in list(self._current.items()):
                try:
                    await self.get(name, read, patch)
                except Exception as exc:  # noqa: BLE001 - a request reads it then; retried later
                    log.warning("keeping the %s answer current failed: %s", name, exc)
                    delay = _RETRY_SECONDS
            if (self.changes, self._subscriptions()) == before and all(
                    self._is_current(name) for name in self._current):
                return

    def current(self, name: str):
        """The kept answer ``name`` if it reflects every change heard (None: it must be read)."""
        return self._kept[name].answer if self._is_current(name) else None

    def _is_current(self, name: str) -> bool:
        kept = self._kept.get(name)
        return kept is not None and kept.seen == self.changes and kept.subscriptions == self._subscriptions()

    async def close(self) -> None:
        """Stop keeping answers current."""
        self._current.clear()
        task, self._keeping_up = self._keeping_up, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def follow(self, membership, topic_of: Mapping[str, Callable[[str], str | None]]) -> None:
        """Hear the changes under each prefix through ``membership``'s notifications; its function
        names the topic of a changed key (None: a key of no topic, which changes nothing)."""
        self._membership = membership
        for prefix, name in topic_of.items():
            membership.on_note(prefix, lambda note, name=name: self._heard(note, name))
        if self._current:
            self._keep_up()

    def _heard(self, note, topic_of: Callable[[str], str | None]) -> None:
        if note.type == NotificationType.KEY_RANGE_DELETED:
            self.changed()
            return
        topic = topic_of(note.key)
        if topic is not None:
            self.changed(topic)

    def changed(self, topic: str | None = None) -> None:
        """A change to ``topic`` (None: to anything) was heard or made here."""
        self.changes += 1
        if topic is None or (self._kept or self._reading) and len(self._touched) >= 4 * MAX_PATCHED \
                and not self._prune():
            self._whole = self.changes
            self._touched.clear()  # every answer read before now is read again whole
        elif not self._kept and not self._reading:
            # Nothing kept or being read (no Kafka client asked yet): whatever is read next reflects
            # this change, and a topic per change would only be held in memory.
            self._touched.clear()
        else:
            self._touched[topic] = self.changes
        if self._current:
            self._keep_up()

    def _prune(self) -> bool:
        """Forget changes every kept answer reflects; whether that made room."""
        oldest = min((kept.seen for kept in self._kept.values()), default=self.changes)
        self._touched = {topic: at for topic, at in self._touched.items() if at > oldest}
        return len(self._touched) < 4 * MAX_PATCHED

    def _subscriptions(self) -> int | None:
        membership = self._membership
        if membership is None or not membership.watching:
            return None
        return membership.subscriptions

    async def get(self, name: str, read: Read, patch: Patch | None = None):
        """``read()``'s answer, or the one kept under ``name`` if nothing changed since, or with
        ``patch`` the kept one patched for the topics changed since (shared: not to be changed by the
        caller)."""
        subscriptions = self._subscriptions()
        if subscriptions is None:
            return await read()
        kept = self._kept.get(name)
        if kept is not None and (kept.subscriptions != subscriptions or kept.seen < self._whole):
            kept = None
        if kept is not None and kept.seen == self.changes:
            return kept.answer
        generation = (subscriptions, self.changes)
        reading = self._reading.get(name)
        if reading is None or reading[0] != generation:
            reading = self._reading[name] = (generation, asyncio.ensure_future(self._read(kept, read, patch)))
            reading[1].add_done_callback(lambda f: self._reading.get(name, (None, None))[1] is f
                                         and self._reading.pop(name))
            reading[1].add_done_callback(lambda f: self._keep(name, generation, f))
        return await asyncio.shield(reading[1])

    def _read(self, kept: _Kept | None, read: Read, patch: Patch | None) -> Awaitable:
        """The reading for the changes heard so far (chosen now: later ones are not its business)."""
        if kept is None or patch is None:
            return read()
        changed = [topic for topic, at in self._touched.items() if at > kept.seen]
        return read() if len(changed) > MAX_PATCHED else patch(kept.answer, changed)

    def _keep(self, name: str, generation: tuple[int, int], done: asyncio.Future) -> None:
        if done.cancelled() or done.exception() is not None:
            return
        subscriptions, seen = generation
        # Changes heard while it was read may or may not be in it: they count as after it.
        if self._subscriptions() != subscriptions or seen < self._whole:
            return
        kept = self._kept.get(name)
        if kept is None or kept.subscriptions != subscriptions or kept.seen <= seen:
            self._kept[name] = _Kept(subscriptions, seen, done.result())


__all__ = ["KeptAnswers", "MAX_PATCHED"]
