"""Answers kept between requests while every change to what they were read from is heard.

Kafka brokers answer Metadata from a cache that the controller's changes update; here a
broker keeps what it read (the namespace's listing, replica layouts) until a change
notification under one of the followed prefixes arrives, from any broker, or the broker
makes a change itself. While the notification stream is down (or before it is followed),
nothing is kept: a change could go unheard.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable


class KeptAnswers:
    """Named answers, each reused until a change is heard; concurrent askers share one reading."""

    def __init__(self) -> None:
        self._membership = None
        self.changes = 0  # changes heard (or made here): each makes every kept answer stale
        self._kept: dict[str, tuple[tuple[int, int], object]] = {}  # name -> (generation, answer)
        self._reading: dict[str, tuple[tuple[int, int], asyncio.Future]] = {}

    def follow(self, membership, prefixes) -> None:
        """Hear the changes under ``prefixes`` through ``membership``'s notifications."""
        self._membership = membership
        for prefix in prefixes:
            membership.on_note(prefix, self.changed)

    def changed(self, _note=None) -> None:
        self.changes += 1

    def _generation(self) -> tuple[int, int] | None:
        membership = self._membership
        if membership is None or not membership.watching:
            return None
        return self.changes, membership.subscriptions

    async def get(self, name: str, read: Callable[[], Awaitable]):
        """``read()``'s answer, or the one kept under ``name`` if nothing changed since (shared: not
        to be changed by the caller)."""
        generation = self._generation()
        if generation is None:
            return await read()
        kept = self._kept.get(name)
        if kept is not None and kept[0] == generation:
            return kept[1]
        reading = self._reading.get(name)
        if reading is None or reading[0] != generation:
            reading = self._reading[name] = (generation, asyncio.ensure_future(read()))
            reading[1].add_done_callback(lambda f: self._reading.get(name, (None, None))[1] is f
                                         and self._reading.pop(name))
        answer = await asyncio.shield(reading[1])
        if self._generation() == generation:  # nothing changed while it was read
            self._kept[name] = (generation, answer)
        return answer


__all__ = ["KeptAnswers"]
