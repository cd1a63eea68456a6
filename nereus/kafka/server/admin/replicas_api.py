"""The replica APIs of Kafka's admin tools, answered for replicas that are views of shared storage.

Every broker can serve any partition from the object store, so there is no replica to move
or to catch up: the replica lists clients see are live brokers, or the lists they assigned.

- ElectLeaders: the leader is always the broker the placement chose; a preferred-leader
  election is ELECTION_NOT_NEEDED (as Kafka answers when the preferred replica leads), an
  unclean one too (every replica is in sync).
- DescribeLogDirs: one log directory per broker, the object store; it lists the
  partitions this broker leads, each with its stored bytes (what retention has not trimmed).
- AlterReplicaLogDirs: moving a replica to that directory is a no-op (NONE); any other
  directory is LOG_DIR_NOT_FOUND.
- AlterPartitionReassignments: a replica list is recorded as the partition's assigned
  replicas (its first broker the preferred leader, as an assignment at creation) and the
  reassignment is complete at once; cancelling (no list) is NO_REASSIGNMENT_IN_PROGRESS.
- ListPartitionReassignments: none is ever in progress.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import ALTER, CLUSTER, DESCRIBE
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ....storage import view
from ....topics.topic_configs import assign_replicas
from ..security import access
from .context import AdminContext

#: The one log directory each broker reports: where its partitions are stored.
LOG_DIR = "object-store"
_UNKNOWN_BYTES = -1  # total/usable bytes of an object store: not a disk's


async def _cluster_allowed(conn, operation: int) -> bool:
    return await access.allowed(conn, CLUSTER, access.CLUSTER_NAME, operation)


async def _partition_counts(ctx: AdminContext, topics: list[str]) -> dict[str, int]:
    """Partition count of each topic of ``topics`` that exists."""
    described = await ctx.catalog.describe_topics(topics)
    return {name: len(streams) for name, (streams, _) in zip(topics, described) if streams}


# -- ElectLeaders ---------------------------------------------------------------------------------
async def handle_elect_leaders(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    rcls, pcls = nested(cls, "ReplicaElectionResult"), nested(cls, "PartitionResult")
    if not await _cluster_allowed(conn, ALTER):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    replica_election_results=())
    if req.topic_partitions is None:  # every partition: none needs an election, so none is listed
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=())
    counts = await _partition_counts(ctx, [t.topic for t in req.topic_partitions])
    results = []
    for t in req.topic_partitions:
        count = counts.get(t.topic)
        parts = []
        for index in t.partitions:
            if count is None or not 0 <= index < count:
                code, message = ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            else:
                code, message = ErrorCode.election_not_needed, "Leader election not needed for topic partition."
            parts.append(make(pcls, partition_id=index, error_code=code, error_message=message))
        results.append(make(rcls, topic=t.topic, partition_result=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, replica_election_results=tuple(results))


# -- DescribeLogDirs / AlterReplicaLogDirs --------------------------------------------------------
async def _stored_bytes(storage, stream_ids: list[int]) -> list[int]:
    """Bytes each stream holds from its start offset on."""
    tails = await storage.tails(stream_ids)
    starts = await asyncio.gather(*(storage.start(sid) for sid in stream_ids))
    below = await asyncio.gather(*(view.size_before(storage.meta, sid, start, tail)
                                   for sid, start, tail in zip(stream_ids, starts, tails)))
    return [max(0, tail.size - size) for tail, size in zip(tails, below)]


async def handle_describe_log_dirs(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    if not await _cluster_allowed(conn, DESCRIBE):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed, results=())
    catalog = ctx.catalog
    if req.topics is None:
        described = dict(await catalog.describe_all())
    else:
        names = [t.topic for t in req.topics]
        described = dict(zip(names, await catalog.describe_topics(names)))
    wanted = {t.topic: set(t.partitions) for t in req.topics} if req.topics is not None else None
    streams = [(topic, index, stream) for topic, (names, _) in sorted(described.items())
               for index, stream in enumerate(names) if wanted is None or index in wanted[topic]]
    leaders = await ctx.routing.leaders([str(s) for _, _, s in streams])
    mine = [(topic, index, stream) for (topic, index, stream), leader in zip(streams, leaders)
            if leader is not None and ctx.routing.is_local(leader)]
    ids = await catalog.storage.stream_ids([str(s) for _, _, s in mine])
    found = [(topic, index, sid) for (topic, index, _), sid in zip(mine, ids) if sid is not None]
    sizes = await _stored_bytes(catalog.storage, [sid for _, _, sid in found])
    by_topic: dict[str, list] = {}
    pcls, tcls, dcls = nested(cls, "DescribeLogDirsPartition"), nested(cls, "DescribeLogDirsTopic"), \
        nested(cls, "DescribeLogDirsResult")
    for (topic, index, _), size in zip(found, sizes):
        by_topic.setdefault(topic, []).append(make(pcls, partition_index=index, partition_size=size, offset_lag=0,
                                                   is_future_key=False))
    topics = tuple(make(tcls, name=topic, partitions=tuple(parts)) for topic, parts in by_topic.items())
    result = make(dcls, error_code=ErrorCode.none, log_dir=LOG_DIR, topics=topics, total_bytes=_UNKNOWN_BYTES,
                  usable_bytes=_UNKNOWN_BYTES)
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results=(result,))


async def handle_alter_replica_log_dirs(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    tcls, pcls = nested(cls, "AlterReplicaLogDirTopicResult"), nested(cls, "AlterReplicaLogDirPartitionResult")
    allowed = await _cluster_allowed(conn, ALTER)
    asked = [(d.path, t.name, index) for d in req.dirs for t in d.topics for index in t.partitions]
    counts = await _partition_counts(ctx, sorted({name for _, name, _ in asked})) if allowed else {}
    by_topic: dict[str, list] = {}
    for path, name, index in asked:
        if not allowed:
            code = ErrorCode.cluster_authorization_failed
        elif not 0 <= index < counts.get(name, 0):
            code = ErrorCode.unknown_topic_or_partition
        else:  # already there; there is no other directory
            code = ErrorCode.none if path == LOG_DIR else ErrorCode.log_dir_not_found
        by_topic.setdefault(name, []).append(make(pcls, partition_index=index, error_code=code))
    results = tuple(make(tcls, topic_name=name, partitions=tuple(parts)) for name, parts in by_topic.items())
    return make(cls, throttle_time=NO_THROTTLE, results=results)


# -- partition reassignments ----------------------------------------------------------------------
async def handle_alter_partition_reassignments(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    tcls, pcls = nested(cls, "ReassignableTopicResponse"), nested(cls, "ReassignablePartitionResponse")
    if not await _cluster_allowed(conn, ALTER):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message=None, responses=())
    counts = await _partition_counts(ctx, [t.name for t in req.topics])
    live = {b.node_id for b in ctx.routing.brokers()}
    responses = []
    for t in req.topics:
        parts, assigned = [], {}
        for p in t.partitions:
            code, message = ErrorCode.none, None
            if not 0 <= p.partition_index < counts.get(t.name, 0):
                code, message = ErrorCode.unknown_topic_or_partition, None
            elif p.replicas is None:
                code, message = ErrorCode.no_reassignment_in_progress, "No reassignment is in progress."
            elif not p.replicas or len(set(p.replicas)) != len(p.replicas):
                code, message = ErrorCode.invalid_replica_assignment, "The replica list is empty or repeats a broker."
            elif set(p.replicas) - live:
                code = ErrorCode.invalid_replica_assignment
                message = f"Unknown broker(s) {sorted(set(p.replicas) - live)}"
            else:
                assigned[p.partition_index] = list(p.replicas)
            parts.append((p.partition_index, code, message))
        if assigned:
            await assign_replicas(ctx.meta, t.name, assigned)
        responses.append(make(tcls, name=t.name, partitions=tuple(
            make(pcls, partition_index=index, error_code=code, error_message=message)
            for index, code, message in parts)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                responses=tuple(responses))


async def handle_list_partition_reassignments(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    if not await _cluster_allowed(conn, DESCRIBE):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message=None, topics=())
    # A reassignment completes when it is made: none is ever ongoing.
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, topics=())


__all__ = ["LOG_DIR", "handle_alter_partition_reassignments", "handle_alter_replica_log_dirs",
           "handle_describe_log_dirs", "handle_elect_leaders", "handle_list_partition_reassignments"]
