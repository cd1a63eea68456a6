"""DescribeTopicPartitions (KIP-966): Metadata's topic and partition answers, a page at a time.

Topics are answered in name order (every topic the principal may describe when none is
named), from the request's cursor on, with at most ``response_partition_limit`` partitions
(and never more than Kafka's ``max.request.partition.size.limit``, 2000); the next cursor
names where the following page starts. Nothing is created: unknown topics are
UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ....topics.topic_configs import replica_layouts
from .cluster_api import NO_LAYOUT, NO_OPERATIONS, ZERO_UUID, partition_entries, wanted_topics, partition_leaders
from .context import AdminContext

MAX_PARTITIONS = 2000  # Kafka's max.request.partition.size.limit


@dataclass(frozen=True)
class _Named:
    name: str


@dataclass(frozen=True)
class _Asked:
    """What ``wanted_topics`` reads of a Metadata request."""

    topics: list[_Named] | None
    allow_auto_topic_creation: bool = False


async def handle_describe_topic_partitions(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    tcls, pcls = nested(cls, "DescribeTopicPartitionsResponseTopic"), nested(cls, "DescribeTopicPartitionsResponsePartition")
    asked = _Asked([_Named(t.name) for t in req.topics] if req.topics else None)
    wanted, _ids, denied, described = await wanted_topics(ctx, conn, asked)
    counts = dict(wanted)
    names = sorted(counts)
    cursor = req.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    budget = min(max(req.response_partition_limit, 1), MAX_PARTITIONS)
    page: list[tuple[str, int, int]] = []  # (topic, first partition, end) of each described topic answered
    entries: list[tuple[str, object]] = []  # (topic, its entry or None: described below)
    next_cursor = None
    for name in names:
        count = counts[name]
        if name in denied:
            entries.append((name, make(tcls, error_code=ErrorCode.topic_authorization_failed, name=name,
                                       topic_id=ZERO_UUID, is_internal=False, partitions=(),
                                       topic_authorized_operations=NO_OPERATIONS)))
            continue
        if count is None or not described.get(name, ((), None))[0]:
            entries.append((name, make(tcls, error_code=ErrorCode.unknown_topic_or_partition, name=name,
                                       topic_id=ZERO_UUID, is_internal=False, partitions=(),
                                       topic_authorized_operations=NO_OPERATIONS)))
            continue
        if budget <= 0:
            next_cursor = (name, 0)
            break
        first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        end = min(count, first + budget)
        page.append((name, first, end))
        entries.append((name, None))
        budget -= end - first
        if end < count:
            next_cursor = (name, end)
            break
    paged = {name: described[name] for name, _, _ in page}
    leaders = await partition_leaders(ctx, paged)
    layouts = await replica_layouts(ctx.meta, list(paged))
    live = [b.node_id for b in ctx.routing.brokers()]
    made: dict = {}
    bounds = {name: (first, end) for name, first, end in page}
    topics = []
    for name, entry in entries:
        if entry is None:
            first, end = bounds[name]
            parts = partition_entries(pcls, ctx.routing, leaders[name], live, layouts.get(name, NO_LAYOUT), made)
            entry = make(tcls, error_code=ErrorCode.none, name=name, topic_id=described[name][1] or ZERO_UUID,
                         is_internal=False, partitions=parts[first:end], topic_authorized_operations=NO_OPERATIONS)
        topics.append(entry)
    ccls = nested(cls, "Cursor")
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics),
                next_cursor=None if next_cursor is None else make(ccls, topic_name=next_cursor[0],
                                                                  partition_index=next_cursor[1]))


__all__ = ["MAX_PARTITIONS", "handle_describe_topic_partitions"]
