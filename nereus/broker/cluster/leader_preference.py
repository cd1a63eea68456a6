"""Preferred leaders: the broker a client asked to lead a partition, ahead of the ring's choice.

A Kafka client that creates a topic (or adds partitions) with explicit replica lists names
each partition's preferred leader first, as Kafka does. Any broker can serve any partition
(storage is shared), so the preference only steers ownership: while the named broker is
active it owns the partition; when it is gone or draining, the ring decides as for any
topic, and the partition goes back once the broker is active again (rebalance).

Preferences are read from the metadata plane when a broker claims a topic or names an
owner for one nobody holds. A claimed topic's is held until the topic is released (its
assignment does not change while it exists). Any other topic's reading is reused for
``CACHE_SECONDS`` only and at most ``MAX_RECENT`` of them are kept: a broker that answers
lookups of millions of topics owned elsewhere keeps no entry per topic.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from ...topics.topic_configs import may_prefer_a_leader, preferred_leader, preferred_leaders

#: How long a preference read for a topic this broker does not own is reused.
CACHE_SECONDS = 30.0
#: Most readings of topics not claimed here that are kept (the oldest go first).
MAX_RECENT = 10_000


class LeaderPreferences:
    """Cached preferred leaders (node ids) of topics, answered as active brokers' names."""

    def __init__(self, meta, membership, *, max_recent: int = MAX_RECENT, clock=time.monotonic) -> None:
        self.meta = meta
        self.membership = membership
        self._held: dict[str, int | None] = {}  # topics claimed here -> node id or None, until forgotten
        self._recent: OrderedDict[str, tuple[int | None, float]] = OrderedDict()  # others -> (node, read at)
        self._max_recent = max_recent
        self._clock = clock

    async def load(self, topic: str) -> None:
        """Read ``topic``'s preference unless it is held or was read recently."""
        if topic in self._held or not may_prefer_a_leader(topic):
            return
        now = self._clock()
        recent = self._recent.get(topic)
        if recent is not None and now - recent[1] < CACHE_SECONDS:
            return
        self._remember(topic, await preferred_leader(self.meta, topic), now)

    def _remember(self, topic: str, node: int | None, now: float) -> None:
        self._recent[topic] = (node, now)
        self._recent.move_to_end(topic)
        self._prune(now)

    def _prune(self, now: float) -> None:
        while self._recent:  # oldest first: drop what is stale or beyond the bound
            read_at = next(iter(self._recent.values()))[1]
            if len(self._recent) <= self._max_recent and now - read_at < CACHE_SECONDS:
                break
            self._recent.popitem(last=False)

    async def hold(self, topic: str) -> None:
        """Keep ``topic``'s preference until ``forget``: the topic was claimed here."""
        if not may_prefer_a_leader(topic):
            return  # nothing to read or keep (most topics: not a Kafka topic's partition)
        if topic not in self._held:
            await self.load(topic)
            recent = self._recent.pop(topic, None)
            self._held[topic] = recent[0] if recent is not None else await preferred_leader(self.meta, topic)

    def drop_held(self) -> None:
        """Every claimed topic was dropped at once (the metadata session was lost)."""
        self._held.clear()

    def _node(self, topic: str) -> int | None:
        if topic in self._held:
            return self._held[topic]
        recent = self._recent.get(topic)
        return recent[0] if recent is not None else None

    async def brokers(self, topics: list[str]) -> list[str | None]:
        """``broker`` of each topic, the preferences not held or recent read together."""
        now = self._clock()
        known: dict[str, int | None] = {}
        missing = []
        for topic in topics:
            if topic in self._held:
                known[topic] = self._held[topic]
            elif (recent := self._recent.get(topic)) is not None and now - recent[1] < CACHE_SECONDS:
                known[topic] = recent[0]
            else:
                missing.append(topic)
        if missing:
            for topic, node in zip(missing, await preferred_leaders(self.meta, missing)):
                known[topic] = node
                self._remember(topic, node, now)
        return [self._name_of(known[topic]) for topic in topics]

    def broker(self, topic: str) -> str | None:
        """The name of the active broker preferred for ``topic``; None: no preference or it is not active."""
        return self._name_of(self._node(topic))

    def _name_of(self, node: int | None) -> str | None:
        if node is None:
            return None
        for address in self.membership.active():
            if address.node_id == node:
                return address.name
        return None

    def forget(self, topic: str) -> None:
        """``topic`` was released here. Stale readings go too: once lookups stop, nothing else drops
        them, and an unload of many topics should leave none of their entries behind."""
        self._held.pop(topic, None)
        self._recent.pop(topic, None)
        self._prune(self._clock())

    def __len__(self) -> int:
        return len(self._held) + len(self._recent)


__all__ = ["CACHE_SECONDS", "LeaderPreferences", "MAX_RECENT"]
