"""Share group offsets (KIP-932): DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, and DeleteGroups of a share group.

A share group's state on a partition is the durable cursor named after the group on
that partition's stream (``groups.py``): its start offset (SPSO) is what the
cursor acknowledged below. Altering sets the cursor there (everything below counts as
delivered, nothing above); deleting drops the cursor, so the next member starts
afresh (``share.auto.offset.reset``). Both need the group empty, as Kafka's do, and
drop this broker's loaded copy of the share-partition so it is read again; the
broker owning the partition, when another one, hears of the write through the
metadata plane's notifications and checks its copy before using it again
(``ShareGroups.note_cursor``), as it does whenever a member opens a share session.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import DELETE, DESCRIBE, GROUP, READ, TOPIC
from ....ledger.cursor import Cursor
from ....storage import StorageError
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ..security import access
from .context import ShareContext
from .partition import STATE_PROPERTY

log = logging.getLogger(__name__)

SHARE_GROUP_PROPERTY = "kafka.share.group"


async def _stream_id(ctx: ShareContext, topic: str, partition: int) -> int | None:
    name = await ctx.catalog.stream_name(topic, partition)
    if name is None:
        return None
    try:
        return await ctx.storage.stream_id(str(name))
    except StorageError:
        return None


async def _cursor(ctx: ShareContext, group_id: str, stream_id: int) -> Cursor | None:
    cursor = await Cursor.load(ctx.meta, stream_id, group_id, objects=ctx.storage.objects)
    if cursor is None or cursor.properties.get(SHARE_GROUP_PROPERTY) != group_id:
        return None  # absent, or a Pulsar subscription of that name
    return cursor


async def group_partitions(ctx: ShareContext, group_id: str) -> dict[str, list[int]]:
    """The topic partitions the share group has state on."""
    out: dict[str, list[int]] = {}
    for topic, count in sorted((await ctx.catalog.list_topics()).items()):
        for partition in range(count):
            sid = await _stream_id(ctx, topic, partition)
            if sid is not None and await _cursor(ctx, group_id, sid) is not None:
                out.setdefault(topic, []).append(partition)
    return out


def _members(ctx: ShareContext, group_id: str) -> int:
    group = ctx.shares.groups.get(group_id)
    return len(group.members) if group is not None else 0


def _forget_loaded(ctx: ShareContext, group_id: str, topic: str, partition: int) -> None:
    ctx.shares.partitions.pop((group_id, topic, partition), None)


async def _group_error(ctx: ShareContext, conn, group_id: str, operation) -> ErrorCode:
    if not group_id:
        return ErrorCode.invalid_group_id
    if not await access.allowed(conn, GROUP, group_id, operation):
        return ErrorCode.group_authorization_failed
    if not ctx.coordinates(group_id):
        return ErrorCode.not_coordinator
    return ErrorCode.none


async def handle_describe_share_group_offsets(ctx: ShareContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    gcls, tcls, pcls = (nested(cls, n) for n in ("DescribeShareGroupOffsetsResponseGroup",
                                                  "DescribeShareGroupOffsetsResponseTopic",
                                                  "DescribeShareGroupOffsetsResponsePartition"))
    groups = []
    for g in req.groups:
        error = await _group_error(ctx, conn, g.group_id, DESCRIBE)
        if error != ErrorCode.none:
            groups.append(make(gcls, group_id=g.group_id, topics=(), error_code=error, error_message=None))
            continue
        if g.topics is None:
            wanted = await group_partitions(ctx, g.group_id)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in g.topics}
        topics = []
        for topic, partitions in wanted.items():
            topic_id = await ctx.catalog.topic_id(topic)
            allowed = await access.allowed(conn, TOPIC, topic, DESCRIBE)
            rows = []
            for partition in partitions:
                offset, lag, code = -1, -1, ErrorCode.none
                sid = await _stream_id(ctx, topic, partition) if allowed else None
                if not allowed:
                    code = ErrorCode.topic_authorization_failed
                elif sid is None:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    cursor = await _cursor(ctx, g.group_id, sid)
                    if cursor is not None:
                        offset = cursor.acks.acked_below
                        end = (await ctx.storage.tail(sid)).next
                        lag = max(0, end - offset - cursor.acks.acked_count_between(offset, end))
                rows.append(make(pcls, partition_index=partition, start_offset=offset, leader_epoch=0, lag=lag,
                                 error_code=code, error_message=None))
            topics.append(make(tcls, topic_name=topic, topic_id=topic_id, partitions=tuple(rows)))
        groups.append(make(gcls, group_id=g.group_id, topics=tuple(topics), error_code=ErrorCode.none,
                           error_message=None))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))


async def _alterable_error(ctx: ShareContext, conn, group_id: str, operation) -> ErrorCode:
    """Why the group's offsets may not be altered or deleted now: ``_group_error``'s answer, or
    NON_EMPTY_GROUP while it has members (offsets change only under an empty group)."""
    error = await _group_error(ctx, conn, group_id, operation)
    if error == ErrorCode.none and _members(ctx, group_id):
        error = ErrorCode.non_empty_group
    return error


async def handle_alter_share_group_offsets(ctx: ShareContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    tcls, pcls = nested(cls, "AlterShareGroupOffsetsResponseTopic"), nested(cls, "AlterShareGroupOffsetsResponsePartition")
    error = await _alterable_error(ctx, conn, req.group_id, READ)
    if error != ErrorCode.none:
        return make(cls, throttle_time=NO_THROTTLE, error_code=error, error_message=None, responses=())
    responses = []
    for t in req.topics:
        allowed = await access.allowed(conn, TOPIC, t.topic_name, READ)
        rows = []
        for p in t.partitions:
            code = ErrorCode.none
            sid = await _stream_id(ctx, t.topic_name, p.partition_index) if allowed else None
            if not allowed:
                code = ErrorCode.topic_authorization_failed
            elif sid is None:
                code = ErrorCode.unknown_topic_or_partition
            elif p.start_offset < 0:
                code = ErrorCode.invalid_request
            else:
                tail = await ctx.storage.tail(sid)
                start = await ctx.storage.start(sid)
                offset = min(max(p.start_offset, start), tail.next)
                await ctx.shares.record(req.group_id)
                cursor, _ = await Cursor.open(ctx.meta, sid, req.group_id, initial=offset,
                                              properties={SHARE_GROUP_PROPERTY: req.group_id},
                                              objects=ctx.storage.objects)
                cursor.reset(offset)
                cursor.set_property(STATE_PROPERTY, None)  # the acquired window started elsewhere
                await cursor.persist()
                _forget_loaded(ctx, req.group_id, t.topic_name, p.partition_index)
                log.info("kafka: share group %s starts %s-%d at %d", req.group_id, t.topic_name, p.partition_index,
                         offset)
            rows.append(make(pcls, partition_index=p.partition_index, error_code=code, error_message=None))
        responses.append(make(tcls, topic_name=t.topic_name, topic_id=await ctx.catalog.topic_id(t.topic_name),
                              partitions=tuple(rows)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                responses=tuple(responses))


async def delete_partitions(ctx: ShareContext, group_id: str, topic: str) -> ErrorCode:
    """Drop the share group's state on every partition of ``topic``."""
    count = await ctx.catalog.partition_count(topic)
    if count is None:
        return ErrorCode.unknown_topic_or_partition
    for partition in range(count):
        sid = await _stream_id(ctx, topic, partition)
        cursor = await _cursor(ctx, group_id, sid) if sid is not None else None
        if cursor is not None:
            await cursor.delete()
        _forget_loaded(ctx, group_id, topic, partition)
    return ErrorCode.none


async def handle_delete_share_group_offsets(ctx: ShareContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    tcls = nested(cls, "DeleteShareGroupOffsetsResponseTopic")
    error = await _alterable_error(ctx, conn, req.group_id, DELETE)
    if error != ErrorCode.none:
        return make(cls, throttle_time=NO_THROTTLE, error_code=error, error_message=None, responses=())
    responses = []
    for t in req.topics:
        code = ErrorCode.topic_authorization_failed
        if await access.allowed(conn, TOPIC, t.topic_name, READ):
            code = await delete_partitions(ctx, req.group_id, t.topic_name)
        responses.append(make(tcls, topic_name=t.topic_name, topic_id=await ctx.catalog.topic_id(t.topic_name),
                              error_code=code, error_message=None))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                responses=tuple(responses))


async def delete_share_group(ctx: ShareContext, group_id: str) -> int | None:
    """DeleteGroups of a share group: its error code, or None if ``group_id`` names no share group."""
    members = _members(ctx, group_id)
    partitions = await group_partitions(ctx, group_id)
    if not members and not partitions and not await ctx.shares.known(group_id):
        return None
    if members:
        return ErrorCode.non_empty_group.value
    for topic in partitions:
        await delete_partitions(ctx, group_id, topic)
    ctx.shares.groups.pop(group_id, None)
    await ctx.shares.forget(group_id)
    log.info("kafka: share group %s deleted", group_id)
    return ErrorCode.none.value


__all__ = ["delete_share_group", "group_partitions", "handle_alter_share_group_offsets",
           "handle_delete_share_group_offsets", "handle_describe_share_group_offsets"]
