"""Group requests: Join/Sync/Heartbeat/Leave, OffsetCommit/OffsetFetch, Describe/List/DeleteGroups.

Coordinator and group errors arrive as ``GroupError`` codes (or per-partition codes
from ``Coordinator.commit_offsets``) and become wire error codes here. A request
for a group this broker does not coordinate (the ring gives it to another broker)
is answered NOT_COORDINATOR: the client asks FindCoordinator again.
"""

from __future__ import annotations

import asyncio
import logging

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import CLUSTER, DELETE, DESCRIBE, GROUP, READ, TOPIC
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from . import txn_offsets
from ..security import access
from ..share import offsets_api as share_offsets
from .context import GroupContext
from .members import EMPTY, GroupError, JoinResult

log = logging.getLogger(__name__)

MIN_SESSION, MAX_SESSION = 1.0, 1800.0


async def handle_join_group(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)

    def reply(result: JoinResult):
        members = tuple(make(nested(cls, "JoinGroupResponseMember"), member_id=m, group_instance_id=i, metadata=md)
                        for m, i, md in result.members)
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode(result.error), generation_id=result.generation,
                    protocol_type=result.protocol_type, leader=result.leader,
                    # nullable only from v7: older versions answer an error with an empty name
                    protocol_name=result.protocol if result.protocol is not None or head.api_version >= 7 else "",
                    skip_assignment=result.skip_assignment, member_id=result.member_id, members=members)

    session = req.session_timeout.total_seconds()
    rebalance = getattr(req, "rebalance_timeout", req.session_timeout).total_seconds()
    if not req.group_id:
        return reply(JoinResult(ErrorCode.invalid_group_id.value, member_id=req.member_id))
    if not await access.allowed(conn, GROUP, req.group_id, READ):
        return reply(JoinResult(ErrorCode.group_authorization_failed.value, member_id=req.member_id))
    if not ctx.coordinator.coordinates(req.group_id):
        return reply(JoinResult(ErrorCode.not_coordinator.value, member_id=req.member_id))
    if not MIN_SESSION <= session <= MAX_SESSION:
        return reply(JoinResult(ErrorCode.invalid_session_timeout.value, member_id=req.member_id))
    try:
        group = await ctx.coordinator.group(req.group_id)
        fut = group.join(req.member_id, head.client_id or "", conn.peer.rsplit(":", 1)[0], session,
                         rebalance if rebalance > 0 else session, req.protocol_type,
                         [(p.name, bytes(p.metadata)) for p in req.protocols],
                         getattr(req, "group_instance_id", None))
    except GroupError as exc:
        return reply(JoinResult(exc.code, member_id=req.member_id))

    async def wait():
        return reply(await fut)

    return wait()


async def handle_sync_group(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)

    def reply(code, assignment=b"", group=None):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode(code),
                    protocol_type=group.protocol_type if group else None,
                    protocol_name=group.protocol if group else None, assignment=assignment)

    if not await access.allowed(conn, GROUP, req.group_id, READ):
        return reply(ErrorCode.group_authorization_failed.value)
    if not ctx.coordinator.coordinates(req.group_id):
        return reply(ErrorCode.not_coordinator.value)
    try:
        group = await ctx.coordinator.group(req.group_id, create=False)
        if group is None:
            return reply(ErrorCode.unknown_member_id.value)
        fut = group.sync(req.member_id, req.generation_id,
                         {a.member_id: bytes(a.assignment) for a in req.assignments},
                         getattr(req, "group_instance_id", None))
    except GroupError as exc:
        return reply(exc.code)

    async def wait():
        code, assignment = await fut
        return reply(code, assignment, group)

    return wait()


async def handle_heartbeat(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    code = ErrorCode.unknown_member_id.value
    try:
        if not await access.allowed(conn, GROUP, req.group_id, READ):
            raise GroupError(ErrorCode.group_authorization_failed.value)
        if not ctx.coordinator.coordinates(req.group_id):
            raise GroupError(ErrorCode.not_coordinator.value)
        group = await ctx.coordinator.group(req.group_id, create=False)
        if group is not None:
            code = group.heartbeat(req.member_id, req.generation_id, getattr(req, "group_instance_id", None))
    except GroupError as exc:
        code = exc.code
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode(code))


async def handle_leave_group(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    ids = ([(m.member_id, m.group_instance_id) for m in req.members] if hasattr(req, "members")
           else [(req.member_id, None)])
    # one top-level error, as Kafka answers it
    if not await access.allowed(conn, GROUP, req.group_id, READ):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.group_authorization_failed, members=())
    if not ctx.coordinator.coordinates(req.group_id):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.not_coordinator, members=())
    try:
        group = await ctx.coordinator.group(req.group_id, create=False)
        codes = [group.leave(mid, iid) if group is not None else ErrorCode.unknown_member_id.value for mid, iid in ids]
    except GroupError as exc:
        codes = [exc.code] * len(ids)
    members = tuple(make(nested(cls, "MemberResponse"), member_id=mid, group_instance_id=iid,
                         error_code=ErrorCode(code)) for (mid, iid), code in zip(ids, codes)) if hasattr(req, "members") else ()
    top = codes[0] if len(codes) == 1 and not hasattr(req, "members") else 0
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode(top), members=members)


async def handle_offset_commit(ctx: GroupContext, conn, head, req):
    coordinator = ctx.coordinator
    cls = response_schema(head.api_key, head.api_version)
    generation = getattr(req, "generation_id_or_member_epoch", getattr(req, "generation_id", -1))
    group, code = None, ErrorCode.invalid_group_id.value
    if req.group_id and not await access.allowed(conn, GROUP, req.group_id, READ):
        code = ErrorCode.group_authorization_failed.value
    elif req.group_id and not coordinator.coordinates(req.group_id):
        code = ErrorCode.not_coordinator.value
    elif req.group_id:
        try:
            group = await coordinator.group(req.group_id)
            code = group.check_commit(req.member_id, generation, getattr(req, "group_instance_id", None),
                                      head.api_version)
        except GroupError as exc:
            code = exc.code
    commits: dict[tuple[str, int], tuple] = {}
    topics = []
    for topic in req.topics:
        parts = []
        count = await ctx.catalog.partition_count(topic.name)
        readable = code != 0 or await access.allowed(conn, TOPIC, topic.name, READ)
        for p in topic.partitions:
            pcode = code
            if pcode == 0 and not readable:
                pcode = ErrorCode.topic_authorization_failed.value
            elif pcode == 0 and (count is None or not 0 <= p.partition_index < count):
                pcode = ErrorCode.unknown_topic_or_partition.value
            elif pcode == 0 and p.committed_metadata is not None and len(p.committed_metadata) > 4096:
                pcode = ErrorCode.offset_metadata_too_large.value
            if pcode == 0:
                commits[(topic.name, p.partition_index)] = (p.committed_offset,
                                                            getattr(p, "committed_leader_epoch", -1),
                                                            p.committed_metadata)
            parts.append((p.partition_index, pcode))
        topics.append((topic.name, parts))
    # Written now, in arrival order (per group), and acknowledged once durable. The write
    # finishes even if the client goes away meanwhile.
    task = coordinator.spawn(coordinator.commit_offsets(group, commits, member_commit=generation >= 0),
                             f"offset commit of group {req.group_id}") if commits else None

    async def wait():
        outcome: dict = {}
        if task is not None:
            try:
                outcome = await asyncio.shield(task)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("kafka: offset commit of %s failed: %s", req.group_id, exc)
                outcome = dict.fromkeys(commits, ErrorCode.coordinator_not_available.value)
        out = []
        for name, parts in topics:
            rows = tuple(make(nested(cls, "OffsetCommitResponsePartition"), partition_index=index,
                              error_code=ErrorCode(outcome.get((name, index), pcode) if pcode == 0 else pcode))
                         for index, pcode in parts)
            out.append(make(nested(cls, "OffsetCommitResponseTopic"), name=name, partitions=rows))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(out))

    return wait()


async def _fetch_group(ctx: GroupContext, conn, group_id: str, topics, require_stable: bool, member_id: str | None = None,
                       member_epoch: int = -1) -> tuple[ErrorCode, dict[str, list[tuple]]]:
    """One group's OffsetFetch: its error, and (index, offset, leader epoch, metadata, code) per topic."""
    if not await access.allowed(conn, GROUP, group_id, DESCRIBE):
        return ErrorCode.group_authorization_failed, {}
    if not ctx.coordinator.coordinates(group_id):
        return ErrorCode.not_coordinator, {}
    if member_id or member_epoch >= 0:  # v9+: a consumer-protocol member fetches at its epoch
        try:
            group = await ctx.coordinator.group(group_id, create=False)
        except GroupError as exc:
            return ErrorCode(exc.code), {}
        code = group.check_fetch(member_id, member_epoch) if group is not None else 0
        if code:
            return ErrorCode(code), {}
    # KIP-447: a consumer asking for stable offsets waits while a transaction holds one pending.
    # Pending offsets are read first: a transaction's completion writes them as committed and only
    # then drops them, so one gone by now is among the committed read next (read the other way
    # round, a completion between the reads would show neither).
    unstable = await txn_offsets.unstable_partitions(ctx.meta, group_id) if require_stable else set()
    committed = await ctx.coordinator.fetch_offsets(group_id)
    if topics is None:
        wanted: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            wanted.setdefault(topic, []).append(partition)
    else:
        wanted = {t.name: list(t.partition_indexes) for t in topics}
    out: dict[str, list[tuple]] = {}
    for name, partitions in wanted.items():
        rows = out.setdefault(name, [])
        for index in partitions:
            value = committed.get((name, index))
            if (name, index) in unstable:
                rows.append((index, -1, -1, "", ErrorCode.unstable_offset_commit))
            elif value is None:
                rows.append((index, -1, -1, "", ErrorCode.none))
            else:
                rows.append((index, value["offset"], value.get("epoch", -1), value.get("metadata"), ErrorCode.none))
    return ErrorCode.none, out


async def handle_offset_fetch(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    if head.api_version >= 8:  # batched: several groups, each with its own error (and member, v9+)
        gcls, tcls, pcls = (nested(cls, n) for n in ("OffsetFetchResponseGroup", "OffsetFetchResponseTopics",
                                                      "OffsetFetchResponsePartitions"))
        groups = []
        for g in req.groups:
            error, found = await _fetch_group(ctx, conn, g.group_id, g.topics, req.require_stable,
                                              getattr(g, "member_id", None), getattr(g, "member_epoch", -1))
            topics = tuple(make(tcls, name=name, partitions=tuple(
                make(pcls, partition_index=i, committed_offset=o, committed_leader_epoch=e, metadata=m,
                     error_code=c) for i, o, e, m, c in rows)) for name, rows in found.items())
            groups.append(make(gcls, group_id=g.group_id, topics=topics, error_code=error))
        return make(cls, throttle_time=NO_THROTTLE, groups=tuple(groups))
    tcls, pcls = nested(cls, "OffsetFetchResponseTopic"), nested(cls, "OffsetFetchResponsePartition")
    error, found = await _fetch_group(ctx, conn, req.group_id, req.topics, getattr(req, "require_stable", False))
    if error != ErrorCode.none and head.api_version < 2:
        # v1 has no top-level error: each asked partition gets it
        found = {t.name: [(i, -1, -1, "", error) for i in t.partition_indexes] for t in req.topics or ()}
    topics = tuple(make(tcls, name=name, partitions=tuple(
        make(pcls, partition_index=i, committed_offset=o, committed_leader_epoch=e, metadata=m, error_code=c)
        for i, o, e, m, c in rows)) for name, rows in found.items())
    return make(cls, throttle_time=NO_THROTTLE, topics=topics, error_code=error)


async def handle_describe_groups(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    gcls, mcls = nested(cls, "DescribedGroup"), nested(cls, "DescribedGroupMember")
    out = []
    for group_id in req.groups:
        try:
            group = await ctx.group_to_describe(conn, group_id)
        except GroupError as exc:
            out.append(make(gcls, error_code=ErrorCode(exc.code), group_id=group_id, group_state="", protocol_type="",
                            protocol_data="", members=(), authorized_operations=-2147483648))
            continue
        if group is None:
            if await ctx.coordinator.has_offsets(group_id):  # only committed offsets: an empty group
                out.append(make(gcls, error_code=ErrorCode.none, group_id=group_id, group_state=EMPTY,
                                protocol_type="", protocol_data="", members=(), authorized_operations=-2147483648))
            elif head.api_version >= 6:  # KIP-1043
                out.append(make(gcls, error_code=ErrorCode.group_id_not_found, error_message=f"Group {group_id} not found.",
                                group_id=group_id, group_state="Dead", protocol_type="", protocol_data="", members=(),
                                authorized_operations=-2147483648))
            else:
                out.append(make(gcls, error_code=ErrorCode.none, group_id=group_id, group_state="Dead",
                                protocol_type="", protocol_data="", members=(), authorized_operations=-2147483648))
            continue
        members = tuple(make(mcls, member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                             client_host=m.client_host, member_metadata=m.metadata_for(group.protocol or ""),
                             member_assignment=m.assignment) for m in group.members.values())
        out.append(make(gcls, error_code=ErrorCode.none, group_id=group_id, group_state=group.state,
                        protocol_type=group.protocol_type or "", protocol_data=group.protocol or "", members=members,
                        authorized_operations=-2147483648))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(out))


async def handle_list_groups(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    states = set(getattr(req, "states_filter", ()) or ())
    # As Kafka: DESCRIBE on the cluster lists every group, otherwise those the principal may DESCRIBE.
    every = await access.allowed(conn, CLUSTER, access.CLUSTER_NAME, DESCRIBE)

    async def visible(group_id: str) -> bool:
        return every or await access.allowed(conn, GROUP, group_id, DESCRIBE)

    types = {t.lower() for t in getattr(req, "types_filter", ()) or ()}
    # Each broker lists the groups it coordinates; clients ask every broker and merge.
    groups = [g for g in await ctx.coordinator.list_groups()
              if (not states or g.state in states) and (not types or g.group_type.lower() in types)
              and ctx.coordinator.is_coordinator(g.group_id) and await visible(g.group_id)]
    listed = tuple(make(nested(cls, "ListedGroup"), group_id=g.group_id, protocol_type=g.protocol_type or "consumer",
                        group_state=g.state, group_type=g.group_type) for g in groups)
    if not types or "share" in types:  # share groups (KIP-932): stored, and loaded ones with their members
        shares = ctx.share.shares
        share_states = {gid: "Empty" for gid in await shares.stored()}
        share_states.update({gid: g.state for gid, g in shares.groups.items()})
        listed += tuple([make(nested(cls, "ListedGroup"), group_id=gid, protocol_type="share", group_state=state,
                              group_type="share")
                         for gid, state in sorted(share_states.items())
                         if (not states or state in states) and ctx.coordinator.is_coordinator(gid)
                         and await visible(gid)])
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=listed)


async def handle_delete_groups(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    results = []
    for group_id in req.groups_names:
        if not await access.allowed(conn, GROUP, group_id, DELETE):
            code = ErrorCode.group_authorization_failed.value
        elif ctx.coordinator.coordinates(group_id):
            code = await ctx.coordinator.delete_group(group_id)
            if code == ErrorCode.group_id_not_found.value:  # a share group's state is its subscriptions
                shared = await share_offsets.delete_share_group(ctx.share, group_id)
                code = code if shared is None else shared
        else:
            code = ErrorCode.not_coordinator.value
        results.append(make(nested(cls, "DeletableGroupResult"), group_id=group_id, error_code=ErrorCode(code)))
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_offset_delete(ctx: GroupContext, conn, head, req):
    """OffsetDelete (kafka-consumer-groups --delete-offsets): a group's committed offsets of some partitions."""
    cls = response_schema(head.api_key, head.api_version)
    tcls, pcls = nested(cls, "OffsetDeleteResponseTopic"), nested(cls, "OffsetDeleteResponsePartition")

    def answer(code, codes: dict | None = None):
        codes = codes or {}
        return make(cls, error_code=ErrorCode(code), throttle_time=NO_THROTTLE, topics=tuple(
            make(tcls, name=t.name, partitions=tuple(
                make(pcls, partition_index=p.partition_index,
                     error_code=ErrorCode(codes.get((t.name, p.partition_index), ErrorCode.none.value)))
                for p in t.partitions)) for t in req.topics) if codes else ())

    if not await access.allowed(conn, GROUP, req.group_id, DELETE):
        return answer(ErrorCode.group_authorization_failed.value)
    if not ctx.coordinator.coordinates(req.group_id):
        return answer(ErrorCode.not_coordinator.value)
    readable = {t.name for t in req.topics if await access.allowed(conn, TOPIC, t.name, READ)}
    asked = [(t.name, p.partition_index) for t in req.topics if t.name in readable for p in t.partitions]
    code, codes = await ctx.coordinator.delete_offsets(req.group_id, asked)
    if code != ErrorCode.none.value:
        return answer(code)
    codes.update({(t.name, p.partition_index): ErrorCode.topic_authorization_failed.value
                  for t in req.topics if t.name not in readable for p in t.partitions})
    return answer(code, codes)


__all__ = ["handle_delete_groups", "handle_offset_delete", "handle_describe_groups", "handle_heartbeat", "handle_join_group",
           "handle_leave_group", "handle_list_groups", "handle_offset_commit", "handle_offset_fetch",
           "handle_sync_group"]
