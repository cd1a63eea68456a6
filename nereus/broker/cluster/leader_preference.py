"""Preferred leaders: the broker a client asked to lead a partition, ahead of the ring's choice.

A Kafka client that creates a topic (or adds partitions) with explicit replica lists names
each partition's preferred leader first, as Kafka does. Any broker can serve any partition
(storage is shared), so the preference only steers ownership: while the named broker is
active it owns the partition; when it is gone or draining, the ring decides as for any
topic, and the partition goes back once the broker is active again (rebalance).

Preferences are read from the metadata plane when a broker claims a topic or names an
owner for one nobody holds, and cached: a topic's assignment does not change while it
exists, so the cache is dropped only when the topic is released.
"""

from __future__ import annotations

import time

from ...topics.topic_configs import preferred_leader

#: How long a preference read for a topic this broker does not own is reused.
CACHE_SECONDS = 30.0


class LeaderPreferences:
    """Cached preferred leaders (node ids) of topics, answered as active brokers' names."""

    def __init__(self, meta, membership) -> None:
        self.meta = meta
        self.membership = membership
        self._nodes: dict[str, tuple[int | None, float]] = {}  # topic -> (node id or None, read at)

    async def load(self, topic: str) -> None:
        """Read ``topic``'s preference unless a recent reading is cached."""
        cached = self._nodes.get(topic)
        if cached is not None and time.monotonic() - cached[1] < CACHE_SECONDS:
            return
        self._nodes[topic] = (await preferred_leader(self.meta, topic), time.monotonic())

    def broker(self, topic: str) -> str | None:
        """The name of the active broker preferred for ``topic``; None: no preference or it is not active."""
        cached = self._nodes.get(topic)
        if cached is None or cached[0] is None:
            return None
        for address in self.membership.active():
            if address.node_id == cached[0]:
                return address.name
        return None

    def forget(self, topic: str) -> None:
        self._nodes.pop(topic, None)


__all__ = ["LeaderPreferences"]
