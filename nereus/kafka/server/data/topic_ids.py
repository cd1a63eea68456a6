"""Requests that name their topics by id (Produce v13+, Fetch v13+, KIP-516), served by name."""

from __future__ import annotations

import uuid
from typing import Callable, Iterable

NamedById = tuple[list, dict[str, uuid.UUID], list[tuple[uuid.UUID | None, list[int]]]]


async def by_name(catalog, topics: Iterable, named: Callable, indexes: Callable) -> NamedById:
    """(each topic as ``named(topic, name)``, the id of each name, the (topic id, partition
    ``indexes(topic)``) of ids no topic has: their partitions are answered UNKNOWN_TOPIC_ID)."""
    out, ids, unknown = [], {}, []
    for topic in topics:
        name = await catalog.topic_name(topic.topic_id) if topic.topic_id is not None else None
        if name is None:
            unknown.append((topic.topic_id, indexes(topic)))
            continue
        ids[name] = topic.topic_id
        out.append(named(topic, name))
    return out, ids, unknown


__all__ = ["by_name"]
