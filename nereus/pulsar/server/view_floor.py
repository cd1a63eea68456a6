"""Where retention ends the key view for ``read_compacted`` readers.

On a Kafka topic with ``cleanup.policy=compact,delete`` retention applies to the view
too, as the Kafka fetch path serves it (``kafka.server.data.compacted``): view records below
the stream's start offset are gone for Pulsar readers as well. Everywhere else (Pulsar
topics, compact-only Kafka topics) the view outlives the raw records it replaces.
"""

from __future__ import annotations

import time

from ...topics.topic_configs import read_topic_configs

#: How long a topic's cleanup policy is trusted before its record is read again.
RECHECK_SECONDS = 1.0
_KAFKA_NAMESPACE = ("public", "default")  # where Kafka topics live
_policies: dict[str, tuple[float, bool]] = {}  # Kafka topic -> (read at, compact and delete)


async def view_floor(topic) -> int:
    """The offset below which ``topic``'s key view serves nothing (0: all of it)."""
    name = topic.name
    if (name.tenant, name.namespace) != _KAFKA_NAMESPACE:
        return 0
    local = name.base.local
    now = time.monotonic()
    cached = _policies.get(local)
    if cached is None or now - cached[0] >= RECHECK_SECONDS:
        policy = (await read_topic_configs(topic.service.meta, local)).get("cleanup.policy", "delete").split(",")
        if len(_policies) > 10_000:
            _policies.clear()
        cached = _policies[local] = (now, "compact" in policy and "delete" in policy)
    return topic.handle.start_offset() if cached[1] else 0


__all__ = ["view_floor"]
