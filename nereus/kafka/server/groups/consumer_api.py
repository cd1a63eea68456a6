"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848's consumer group protocol).

The state machine is ``consumer_group.py``; here topic ids become names and back,
and the subscribed topics' partition counts are read for the assignor.
"""

from __future__ import annotations

import datetime
import logging
import re

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import GROUP, READ
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ..security import access
from .consumer_group import HeartbeatAnswer
from .context import GroupContext
from .members import GroupError

log = logging.getLogger(__name__)


async def _partition_counts(catalog, topics) -> dict[str, int]:
    counts = {}
    for topic in topics:
        count = await catalog.partition_count(topic)
        if count is not None:
            counts[topic] = count
    return counts


async def handle_consumer_group_heartbeat(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    catalog = ctx.catalog
    heartbeat_interval = ctx.heartbeat_interval  # the group's own once its configs are read below

    def reply(answer: HeartbeatAnswer, assignment=None):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode(answer.error), error_message=answer.message,
                    member_id=answer.member_id, member_epoch=answer.epoch,
                    heartbeat_interval=datetime.timedelta(seconds=heartbeat_interval), assignment=assignment)

    if not req.group_id:
        return reply(HeartbeatAnswer(ErrorCode.invalid_request.value, message="the group id is empty"))
    if not await access.allowed(conn, GROUP, req.group_id, READ):
        return reply(HeartbeatAnswer(ErrorCode.group_authorization_failed.value))
    if not ctx.coordinator.coordinates(req.group_id):
        return reply(HeartbeatAnswer(ErrorCode.not_coordinator.value))
    if req.member_epoch == 0 and req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
        return reply(HeartbeatAnswer(ErrorCode.invalid_request.value, message="a joining member must subscribe"))
    topics = list(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None
    regex = getattr(req, "subscribed_topic_regex", None)
    if regex is not None:
        try:
            pattern = re.compile(regex)
        except re.error as exc:
            return reply(HeartbeatAnswer(ErrorCode.invalid_regular_expression.value, message=str(exc)))
        topics = sorted({*(topics or ()), *(t for t in await catalog.list_topics() if pattern.fullmatch(t))})
    session_timeout, heartbeat_interval = await ctx.consumer_timings(req.group_id)
    try:
        group = await ctx.coordinator.group(req.group_id)
        group.consumer_session_timeout = session_timeout
        wanted = set(topics or ()) | (group.consumer.subscribed if group.consumer is not None else set())
        member = group.consumer_members.get(req.member_id)
        if member is not None and topics is None:
            wanted |= member.topics
        counts = await _partition_counts(catalog, wanted)
        names = {await catalog.topic_id(t): t for t in counts}
        owned = None
        if req.topic_partitions is not None:
            owned = {names[tp.topic_id]: frozenset(tp.partitions) for tp in req.topic_partitions
                     if tp.topic_id in names}
        fut = group.consumer_heartbeat(
            ctx.coordinator.clock(), member_id=req.member_id, epoch=req.member_epoch,
            instance_id=req.instance_id, rack_id=req.rack_id, client_id=head.client_id or "",
            client_host=conn.peer.rsplit(":", 1)[0], rebalance_timeout=req.rebalance_timeout.total_seconds(),
            topics=topics, assignor=req.server_assignor, owned=owned, partitions=counts)
    except GroupError as exc:
        return reply(HeartbeatAnswer(exc.code))
    ids = {t: i for i, t in names.items()}

    async def wait():
        answer = await fut
        assignment = None
        if answer.error == 0 and answer.assignment is not None:
            tp_cls = nested(cls, "TopicPartitions")
            assignment = make(nested(cls, "Assignment"), topic_partitions=tuple(
                make(tp_cls, topic_id=ids[t], partitions=tuple(sorted(ps)))
                for t, ps in sorted(answer.assignment.items()) if ps and t in ids))
        return reply(answer, assignment)

    return wait()


async def handle_consumer_group_describe(ctx: GroupContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    gcls, mcls = nested(cls, "DescribedGroup"), nested(cls, "Member")
    acls, tcls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")

    async def assignment(tp):
        rows = [make(tcls, topic_id=await ctx.catalog.topic_id(t), topic_name=t, partitions=tuple(sorted(ps)))
                for t, ps in sorted(tp.items()) if ps]
        return make(acls, topic_partitions=tuple(rows))

    out = []
    for group_id in req.group_ids:
        error, group = ErrorCode.none, None
        try:
            group = await ctx.group_to_describe(conn, group_id)
            if group is None or group.consumer is None or (group.members and not group.is_consumer):
                error = ErrorCode.group_id_not_found
        except GroupError as exc:
            error = ErrorCode(exc.code)
        if error != ErrorCode.none:
            out.append(make(gcls, error_code=error, error_message=None, group_id=group_id, group_state="",
                            group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                            authorized_operations=-2147483648))
            continue
        state = group.consumer
        members = []
        for m in state.members.values():
            members.append(make(mcls, member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                                member_epoch=m.epoch, client_id=m.client_id, client_host=m.client_host,
                                subscribed_topic_names=tuple(sorted(m.topics)), subscribed_topic_regex=None,
                                assignment=await assignment(m.assigned),
                                target_assignment=await assignment(state.target.get(m.member_id, {})),
                                member_type=1))
        out.append(make(gcls, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                        group_state=state.state, group_epoch=state.epoch, assignment_epoch=state.assignment_epoch,
                        assignor_name=state.assignor, members=tuple(members), authorized_operations=-2147483648))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(out))


__all__ = ["handle_consumer_group_describe", "handle_consumer_group_heartbeat"]
