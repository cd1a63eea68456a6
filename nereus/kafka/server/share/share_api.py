"""ShareGroupHeartbeat and ShareGroupDescribe (KIP-932): share group memberships.

Memberships are ``group.py``, the broker's registry ``groups.py``; here topic ids
become names and back. ShareFetch and ShareAcknowledge are ``fetch_api.py``.
"""

from __future__ import annotations

import datetime
import logging
import time

from kio.schema.errors import ErrorCode

from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ....auth.kafka_acls import DESCRIBE, GROUP, READ, TOPIC
from ..security import access
from .group import ASSIGNOR, LEAVE, ShareGroupState, ShareHeartbeatAnswer
from .context import ShareContext

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = datetime.timedelta(seconds=2)  # Kafka's default is 5 s


# -- membership ----------------------------------------------------------------------------------
async def handle_share_group_heartbeat(ctx: ShareContext, conn, head, req):
    shares = ctx.shares
    cls = response_schema(head.api_key, head.api_version)

    def reply(answer: ShareHeartbeatAnswer, assignment=None):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode(answer.error), error_message=answer.message,
                    member_id=answer.member_id, member_epoch=answer.epoch, heartbeat_interval=HEARTBEAT_INTERVAL,
                    assignment=assignment)

    if not req.group_id:
        return reply(ShareHeartbeatAnswer(ErrorCode.invalid_request.value, message="the group id is empty"))
    if not await access.allowed(conn, GROUP, req.group_id, READ):
        return reply(ShareHeartbeatAnswer(ErrorCode.group_authorization_failed.value))
    hidden = [t for t in req.subscribed_topic_names or () if not await access.allowed(conn, TOPIC, t, DESCRIBE)]
    if hidden:
        return reply(ShareHeartbeatAnswer(ErrorCode.topic_authorization_failed.value,
                                          message=f"Topic authorization failed for {', '.join(sorted(hidden))}"))
    if not ctx.coordinates(req.group_id):
        return reply(ShareHeartbeatAnswer(ErrorCode.not_coordinator.value))
    if req.member_epoch == 0:  # a member joins: the group is stored from now on
        await shares.record(req.group_id)
    group = shares.group(req.group_id)
    topics = list(req.subscribed_topic_names) if req.subscribed_topic_names is not None else None
    wanted = set(topics or ()) | group.subscribed
    # One batched read gives each topic's partitions and id (a topic created again has a new id).
    named = sorted(wanted)
    described = dict(zip(named, await ctx.catalog.describe_topics(named)))
    counts = {t: len(streams) for t, (streams, _) in described.items() if streams}
    ids = {t: described[t][1] for t in counts}
    before = set(group.members)
    answer = group.heartbeat(time.monotonic(), member_id=req.member_id, epoch=req.member_epoch, topics=topics,
                             rack_id=req.rack_id, client_id=head.client_id or "",
                             client_host=conn.peer.rsplit(":", 1)[0], partitions=counts, topic_ids=ids)
    # Members that timed out give up their records now; one that left closes its share
    # sessions next (with its last acknowledgements), which releases the rest.
    for gone in before - set(group.members) - {req.member_id}:
        shares.member_gone(req.group_id, gone)
    if answer.epoch == LEAVE or answer.error:
        return reply(answer)
    assignment = None
    if answer.assignment is not None:
        tcls = nested(cls, "TopicPartitions")
        rows = [make(tcls, topic_id=await ctx.catalog.topic_id(t), partitions=tuple(sorted(ps)))
                for t, ps in sorted(answer.assignment.items()) if ps]
        assignment = make(nested(cls, "Assignment"), topic_partitions=tuple(rows))
    return reply(answer, assignment)


async def handle_share_group_describe(ctx: ShareContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    gcls, mcls = nested(cls, "DescribedGroup"), nested(cls, "Member")
    acls, tcls = nested(cls, "Assignment"), nested(cls, "TopicPartitions")
    out = []
    for group_id in req.group_ids:
        group = ctx.shares.groups.get(group_id)
        error = ErrorCode.none
        if not await access.allowed(conn, GROUP, group_id, DESCRIBE):
            error = ErrorCode.group_authorization_failed
        elif not ctx.coordinates(group_id):
            error = ErrorCode.not_coordinator
        elif group is None and await ctx.shares.known(group_id):
            group = ShareGroupState(group_id)  # stored, no member back yet: Empty
        elif group is None:
            error = ErrorCode.group_id_not_found
        if error != ErrorCode.none:
            out.append(make(gcls, error_code=error, error_message=None, group_id=group_id, group_state="Dead",
                            group_epoch=-1, assignment_epoch=-1, assignor_name="", members=(),
                            authorized_operations=-2147483648))
            continue
        group.expire(time.monotonic())
        members = []
        for m in group.members.values():
            rows = [make(tcls, topic_id=await ctx.catalog.topic_id(t), topic_name=t, partitions=tuple(sorted(ps)))
                    for t, ps in sorted(m.assigned.items()) if ps]
            members.append(make(mcls, member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.epoch,
                                client_id=m.client_id, client_host=m.client_host,
                                subscribed_topic_names=tuple(sorted(m.topics)),
                                assignment=make(acls, topic_partitions=tuple(rows))))
        out.append(make(gcls, error_code=ErrorCode.none, error_message=None, group_id=group_id,
                        group_state=group.state, group_epoch=group.epoch, assignment_epoch=group.epoch,
                        assignor_name=ASSIGNOR, members=tuple(members), authorized_operations=-2147483648))
    return make(cls, throttle_time=NO_THROTTLE, groups=tuple(out))


__all__ = ["handle_share_group_describe", "handle_share_group_heartbeat"]
