"""Kafka consumer groups for the console: type, members, assignments, committed offsets and lag.

``GET /console/api/kafka/groups`` lists every group with its details,
``GET /console/api/kafka/groups/{group}`` one group (404 if it has neither a record
nor committed offsets), ``GET /console/api/kafka/topic-groups/{tenant}/{namespace}/{topic}``
the groups that committed offsets on one topic (a topic read only by Kafka consumers
has no Pulsar subscription to show). A group this broker coordinates is shown as held in memory;
another broker's group as its metadata record has it (written at each rebalance).
A group is ``classic`` (JoinGroup/SyncGroup) or ``consumer`` (KIP-848's protocol).
Lag is the partition's log end offset (the stream's next offset: a Kafka offset is
the stream offset) minus the committed offset.
"""

from __future__ import annotations

import json
import struct

from aiohttp import web

from ...kafka.server.catalog.catalog import NAMESPACE_PREFIX, pulsar_name
from ...kafka.server.groups.consumer_group import ConsumerGroupState, ConsumerMember
from ...kafka.server.groups.members import EMPTY, Member, group_key
from ...ledger.naming import InvalidTopicName, TopicName
from ...storage import view
from ...topics import partitions_of
from ..admin.common import AdminError, context


def _coordinator(request: web.Request):
    ctx = context(request)
    if ctx.node is None:
        raise AdminError(501, "This broker runs without a Kafka listener")
    return ctx, ctx.node.kafka.coordinator


def decode_assignment(data: bytes) -> list[dict] | None:
    """Kafka's ConsumerProtocolAssignment (any version): ``[{"topic", "partitions"}]``; None if not one."""
    try:
        pos = 2  # version
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out = []
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos:pos + size].decode()
            pos += size
            (n,) = struct.unpack_from(">i", data, pos)
            pos += 4
            partitions = list(struct.unpack_from(f">{max(n, 0)}i", data, pos))
            pos += 4 * max(n, 0)
            out.append({"topic": topic, "partitions": partitions})
        return out
    except (struct.error, UnicodeDecodeError):
        return None


def _member(member: Member, protocol_type: str | None) -> dict:
    assignment = decode_assignment(member.assignment) if protocol_type == "consumer" and member.assignment else None
    return {"memberId": member.member_id, "clientId": member.client_id, "clientHost": member.client_host,
            "instanceId": member.instance_id, "assignment": assignment}


async def _log_end(meta, topic: str, partition: int, cache: dict) -> int | None:
    """The next offset of a Kafka topic's partition, None if it does not exist."""
    if (topic, partition) not in cache:
        try:
            name = pulsar_name(topic)
            count = await partitions_of(meta, name)
        except ValueError:
            cache[(topic, partition)] = None
            return None
        stream = name.partition(partition) if count else name
        stream_id = await view.stream_id(meta, str(stream))
        cache[(topic, partition)] = None if stream_id is None else (await view.bounds(meta, stream_id))[1]
    return cache[(topic, partition)]


def _consumer_member(member: ConsumerMember) -> dict:
    return {"memberId": member.member_id, "clientId": member.client_id, "clientHost": member.client_host,
            "instanceId": member.instance_id,
            "assignment": [{"topic": t, "partitions": sorted(p)} for t, p in sorted(member.assigned.items())]}


async def describe(ctx, coordinator, group_id: str, listed_state: str | None, cache: dict) -> dict | None:
    loaded, rec = coordinator.groups.get(group_id), None
    if loaded is not None and not loaded.gone:
        state, generation, protocol_type = loaded.state, loaded.generation, loaded.protocol_type
        protocol, leader, members = loaded.protocol, loaded.leader, list(loaded.members.values())
        consumer = loaded.consumer if loaded.is_consumer else None
    else:
        rec = await ctx.meta.get(group_key(group_id))
        value = json.loads(rec.value) if rec is not None else {}
        members = [Member.from_json(m) for m in value.get("members", ())]
        state = listed_state or (value.get("state", EMPTY) if members else EMPTY)
        generation, protocol_type = value.get("generation", 0), value.get("protocol_type")
        protocol, leader = value.get("protocol"), value.get("leader")
        stored = value.get("consumer")
        consumer = ConsumerGroupState.from_json(stored) if stored and stored.get("members") else None
    if consumer is not None:  # KIP-848's protocol: the broker assigns, members have epochs, no leader
        kind, state, generation, protocol, leader = "consumer", listed_state or consumer.state, consumer.epoch, \
            consumer.assignor, None
        shown = [_consumer_member(m) for m in consumer.members.values()]
    else:
        kind, shown = "classic", [_member(m, protocol_type) for m in members]
    committed = await coordinator.fetch_offsets(group_id)
    if loaded is None and rec is None and not committed:
        return None
    offsets = []
    for (topic, partition), value in sorted(committed.items()):
        end = await _log_end(ctx.meta, topic, partition, cache)
        lag = max(0, end - value["offset"]) if end is not None and value["offset"] >= 0 else None
        offsets.append({"topic": topic, "partition": partition, "committedOffset": value["offset"],
                        "logEndOffset": end, "lag": lag, "metadata": value.get("metadata"),
                        "commitTimestamp": value.get("ts")})
    return {"groupId": group_id, "groupType": kind, "state": state, "generation": generation,
            "protocolType": protocol_type if kind == "classic" else "consumer", "protocol": protocol, "leader": leader,
            "coordinatedHere": loaded is not None and not loaded.gone, "members": shown, "offsets": offsets,
            "totalLag": sum(o["lag"] or 0 for o in offsets)}


async def list_groups(request: web.Request) -> web.Response:
    ctx, coordinator = _coordinator(request)
    cache: dict = {}
    out = []
    for listing in await coordinator.list_groups():
        group = await describe(ctx, coordinator, listing.group_id, listing.state, cache)
        if group is not None:
            out.append(group)
    return web.json_response({"groups": out})


async def topic_groups(request: web.Request) -> web.Response:
    """The Kafka groups with offsets committed on one topic: their lag per partition and in all."""
    ctx, coordinator = _coordinator(request)
    m = request.match_info
    try:
        name = TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}").base
    except InvalidTopicName:
        raise AdminError(412, "Topic name is not valid") from None
    out = []
    if str(name).startswith(NAMESPACE_PREFIX):  # the only namespace Kafka clients see
        cache: dict = {}
        for listing in await coordinator.list_groups():
            group = await describe(ctx, coordinator, listing.group_id, listing.state, cache)
            offsets = [o for o in (group or {}).get("offsets", ()) if o["topic"] == name.local]
            if offsets:
                out.append({"groupId": group["groupId"], "groupType": group["groupType"], "state": group["state"],
                            "members": len(group["members"]), "partitions": offsets,
                            "totalLag": sum(o["lag"] or 0 for o in offsets)})
    return web.json_response({"topic": str(name), "groups": out})


async def get_group(request: web.Request) -> web.Response:
    ctx, coordinator = _coordinator(request)
    group = await describe(ctx, coordinator, request.match_info["group"], None, {})
    if group is None:
        raise AdminError(404, "Group not found")
    return web.json_response(group)


__all__ = ["decode_assignment", "describe", "get_group", "list_groups", "topic_groups"]
