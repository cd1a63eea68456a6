"""Metadata, DescribeCluster and FindCoordinator: the topics, brokers and coordinators clients route by."""

from __future__ import annotations

import asyncio
import logging
import uuid

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import CLUSTER, DESCRIBE, TOPIC, TRANSACTIONAL_ID
from ....topics.topic_configs import ReplicaLayout, replica_layouts
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ..catalog.routing import NO_LEADER, Routing
from ..security import access
from ..catalog.catalog import valid_name
from .context import AdminContext

log = logging.getLogger(__name__)

ZERO_UUID = uuid.UUID(int=0)
NO_OPERATIONS = -2147483648
NO_LAYOUT = ReplicaLayout()

def _brokers(cls, name: str, routing: Routing, also=(), protocol: str = "PLAINTEXT") -> tuple[tuple, int]:
    """The live brokers (and the leaders ``also`` named) as ``name`` entries of ``cls``, and the controller id.

    Their addresses are those of the listener (``protocol``) the client came by.
    """
    live = routing.brokers(protocol=protocol)
    # No broker is special here; Kafka clients only need some live broker's id (admin requests go there).
    controller = live[0].node_id if live else -1
    bcls = nested(cls, name)
    return tuple(make(bcls, node_id=b.node_id, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                 for b in (routing.brokers(also, protocol) if also else live)), controller


async def handle_metadata(ctx: AdminContext, conn, head, req):
    routing = ctx.routing
    cls = response_schema(head.api_key, head.api_version)
    topic_cls, part_cls = nested(cls, "MetadataResponseTopic"), nested(cls, "MetadataResponsePartition")
    ctx.catalog.keep_listing_current()  # a Kafka client is here: every topic may be asked next
    wanted, asked_ids, denied, described = await wanted_topics(ctx, conn, req)
    known = [name for name, count in wanted if count is not None]
    if len(described) != len(known):  # some left out (not there, or not to be described)
        described = {name: described[name] for name in known}
    layouts = await (ctx.catalog.all_replica_layouts() if req.topics is None else replica_layouts(ctx.meta, known))
    partitions = await partition_leaders(ctx, described)
    live = [b.node_id for b in routing.brokers()]
    with_ids = head.api_version >= 10
    made: dict = {}  # partition entries by their fields (``partition_entries``)
    topics = []
    for index, (name, count) in enumerate(wanted):
        if index in asked_ids:  # named by an id no topic has
            topics.append(make(topic_cls, error_code=ErrorCode.unknown_topic_id,
                               name=None if head.api_version >= 12 else "", topic_id=asked_ids[index],
                               is_internal=False, partitions=(), topic_authorized_operations=NO_OPERATIONS))
            continue
        if name in denied:
            topics.append(make(topic_cls, error_code=ErrorCode.topic_authorization_failed, name=name,
                               topic_id=ZERO_UUID, is_internal=False, partitions=(),
                               topic_authorized_operations=NO_OPERATIONS))
            continue
        if count is None or not described[name][0]:  # not there (or deleted since it was listed)
            code = ErrorCode.invalid_topic_exception if not valid_name(name) else ErrorCode.unknown_topic_or_partition
            topics.append(make(topic_cls, error_code=code, name=name, topic_id=ZERO_UUID, is_internal=False,
                               partitions=(), topic_authorized_operations=NO_OPERATIONS))
            continue
        parts = partition_entries(part_cls, routing, partitions[name], live, layouts.get(name, NO_LAYOUT), made)
        topic_id = described[name][1] if with_ids else None
        operations = (await access.authorized_operations(conn, TOPIC, name, access.TOPIC_OPERATIONS)
                      if getattr(req, "include_topic_authorized_operations", False) else NO_OPERATIONS)
        topics.append(make(topic_cls, error_code=ErrorCode.none, name=name, topic_id=topic_id or ZERO_UUID,
                           is_internal=False, partitions=parts, topic_authorized_operations=operations))
    leaders = {leader.name: leader for described in partitions.values() for leader, _ in described
               if leader is not None}
    brokers, controller = _brokers(cls, "MetadataResponseBroker", routing, also=leaders.values(),
                                   protocol=conn.protocol)
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, brokers=brokers,
                cluster_id=routing.local.cluster_id, controller_id=controller, topics=tuple(topics),
                cluster_authorized_operations=await _cluster_operations(conn, req))


async def wanted_topics(ctx: AdminContext, conn, req) -> tuple[list[tuple[str, int | None]], dict[int, object], set[str],
                                                      dict]:
    """The topics a Metadata request asks about, each with its partition count (None: not there, or
    not to be described), auto-created where asked and allowed; the topic ids named that no topic has
    (by their index among the topics); the named topics the principal may not describe; and
    ``describe_topics``'s answer for the topics described (``describe_all``'s when every topic
    is asked for: the listing read it)."""
    catalog = ctx.catalog
    auto_create = getattr(req, "allow_auto_topic_creation", True)
    asked_ids: dict[int, object] = {}
    denied: set[str] = set()  # their names are still answered
    if req.topics is None:  # as Kafka: the topics the principal may not describe are left out
        everything = await catalog.describe_all()
        listed = sorted((name, len(streams)) for name, (streams, _) in everything.items())
        return await access.allowed_items(conn, TOPIC, listed, DESCRIBE), asked_ids, denied, everything
    names: list[str] = []
    for t in req.topics:
        name = t.name
        if name and not await access.allowed(conn, TOPIC, name, DESCRIBE):
            denied.add(name)
        elif not name and getattr(t, "topic_id", None) not in (None, ZERO_UUID):
            name = await catalog.topic_name(t.topic_id)
            if name is None:
                asked_ids[len(names)] = t.topic_id
                name = ""
        names.append(name or "")
    # Every topic named is described with one read of each record (a client names thousands at once).
    asked = list(dict.fromkeys(n for n in names if n and n not in denied))
    described = dict(zip(asked, await catalog.describe_topics(asked)))
    missing = [n for n in asked if not described[n][0]]
    if missing and auto_create and ctx.limits.auto_create:
        created = [n for n in missing if valid_name(n) and await access.may_create(conn, n)]
        for name in created:
            try:
                await catalog.create(name, ctx.limits.default_partitions)
            except Exception as exc:  # a concurrent creation is fine
                log.debug("auto-create of %s: %s", name, exc)
        described.update(zip(created, await catalog.describe_topics(created)))
    wanted = [(name, len(described[name][0]) or None if name in described else None) for name in names]
    return wanted, asked_ids, denied, described


async def partition_leaders(ctx: AdminContext, described: dict[str, tuple[list, object]]) -> dict[str, list]:
    """(leader or None, leader epoch) of each partition of each topic described.

    Every partition's leader and epoch are metadata reads: all of them at once, read together."""
    flat = [stream for streams, _ in described.values() for stream in streams]
    leaders, epochs = await asyncio.gather(ctx.routing.leaders([str(s) for s in flat]),
                                           ctx.catalog.leader_epochs(flat))
    pairs = list(zip(leaders, epochs))
    out, at = {}, 0
    for name, (streams, _) in described.items():
        out[name] = pairs[at:at + len(streams)]
        at += len(streams)
    return out


def partition_entries(part_cls, routing: Routing, leaders: list, live: list[int], layout: ReplicaLayout,
                made: dict) -> tuple:
    """A topic's partitions as Metadata answers them, from (leader or None, leader epoch) of each.

    ``made``: the partition entries of this answer so far, by their fields: entries are
    immutable, and thousands of partitions share the same few (index, leader, epoch, replicas).
    """
    parts = []
    node_of: dict = {}
    for index, (leader, epoch) in enumerate(leaders):
        if leader is None:  # clients refresh metadata and try again
            key = (index, NO_LEADER, epoch, None)
        else:
            node = node_of.get(leader)
            if node is None:
                node = node_of[leader] = routing.node_id(leader)
            key = (index, node, epoch, layout.factor if index not in layout.assigned else layout.assigned[index])
        part = made.get(key)
        if part is None:
            if leader is None:
                part = make(part_cls, error_code=ErrorCode.leader_not_available, partition_index=index,
                            leader_id=NO_LEADER, leader_epoch=epoch, replica_nodes=(), isr_nodes=(),
                            offline_replicas=())
            else:
                replicas, isr, offline = _replicas(node, live, layout, index)
                part = make(part_cls, error_code=ErrorCode.none, partition_index=index, leader_id=node,
                            leader_epoch=epoch, replica_nodes=replicas, isr_nodes=isr, offline_replicas=offline)
            made[key] = part
        parts.append(part)
    return tuple(parts)


def _replicas(leader: int, live: list[int], layout: ReplicaLayout, index: int) -> tuple[tuple[int, ...], ...]:
    """(replicas, in-sync replicas, offline replicas) of partition ``index`` led by ``leader``.

    Every broker reads the partition from the shared storage and can take it over, so
    live brokers are its replicas and all of them are in sync: the leader, then others,
    the replication factor's worth (None: all of them). A replica list a client assigned
    is answered as assigned (the leader is added first if it is not in it), its brokers
    that are gone as offline, as Kafka lists them.
    """
    assigned = layout.assigned.get(index)
    if assigned:
        replicas = assigned if leader in assigned else (leader, *assigned)
        up = set(live) | {leader}
        return (replicas, tuple(n for n in replicas if n in up), tuple(n for n in replicas if n not in up))
    others = [n for n in live if n != leader]
    replicas = tuple([leader] + others)[:layout.factor or None]
    return replicas, replicas, ()


async def _cluster_operations(conn, req) -> int:
    """The cluster's authorized operations when the request asks for them (else Kafka's "not asked")."""
    if not getattr(req, "include_cluster_authorized_operations", False):
        return NO_OPERATIONS
    return await access.authorized_operations(conn, CLUSTER, access.CLUSTER_NAME, access.CLUSTER_OPERATIONS)


async def handle_describe_cluster(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    brokers, controller = _brokers(cls, "DescribeClusterBroker", ctx.routing, protocol=conn.protocol)
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, endpoint_type=1,
                cluster_id=ctx.routing.local.cluster_id, controller_id=controller, brokers=brokers,
                cluster_authorized_operations=await _cluster_operations(conn, req))


async def handle_find_coordinator(ctx: AdminContext, conn, head, req):
    """A group's (key type 0) or transactional id's (1) coordinator: the ring's broker for it."""
    routing = ctx.routing
    cls = response_schema(head.api_key, head.api_version)
    key_type = getattr(req, "key_type", 0)

    async def answer(key: str) -> dict:
        if key_type not in (0, 1):
            return dict(error_code=ErrorCode.invalid_request, error_message=f"unknown coordinator type {key_type}",
                        node_id=-1, host="", port=-1)
        if key_type == 1 and not await access.allowed(conn, TRANSACTIONAL_ID, key, DESCRIBE):
            return dict(error_code=ErrorCode.transactional_id_authorization_failed, error_message=None,
                        node_id=-1, host="", port=-1)
        where = routing.coordinator(key) if key_type == 0 else routing.txn_coordinator(key)
        broker = routing.kafka_broker(where, conn.protocol)
        return dict(error_code=ErrorCode.none, error_message=None, node_id=broker.node_id, host=broker.host,
                    port=broker.port)

    if head.api_version >= 4:
        coords = tuple([make(nested(cls, "Coordinator"), key=key, **await answer(key)) for key in req.coordinator_keys])
        return make(cls, throttle_time=NO_THROTTLE, coordinators=coords)
    return make(cls, throttle_time=NO_THROTTLE, **await answer(req.key))


__all__ = ["NO_LAYOUT", "NO_OPERATIONS", "ZERO_UUID", "handle_describe_cluster", "handle_find_coordinator", "handle_metadata",
           "partition_entries", "partition_leaders", "wanted_topics"]
