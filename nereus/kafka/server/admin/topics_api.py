"""CreateTopics, DeleteTopics, CreatePartitions (topics are Pulsar partitioned topics).

Each partition created or deleted counts against the client's ``controller_mutation_rate``
quota (``security/quotas.py``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import ALTER, DELETE, TOPIC
from ....topics.topic_configs import replica_layouts
from ....codec.kafka import make, nested
from ....codec.kafka.protocol import response_schema
from ..catalog import config_defs
from ..security import access
from ..catalog.catalog import TopicError, valid_name
from .cluster_api import ZERO_UUID
from .configs_api import ConfigRequestError, validate_topic_configs
from .context import AdminContext, TopicLimits
from ..security.quotas import MUTATION, throttle_time

log = logging.getLogger(__name__)


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


#: The first version of CreateTopics, DeleteTopics and CreatePartitions refusing a topic with
#: THROTTLING_QUOTA_EXCEEDED (KIP-599); older versions are served and only throttled.
_STRICT_SINCE = {19: 6, 20: 5, 37: 3}


class _Mutations:
    """The partitions a request creates or deletes, against the client's controller_mutation_rate.

    As Kafka's controller mutation quota: a strict request (new versions) is throttled only when
    one of its topics was refused; an older one whenever its mutations leave the client over."""

    def __init__(self, throttles, conn, head) -> None:
        self.throttles, self.conn, self.head = throttles, conn, head
        self.strict = head.api_version >= _STRICT_SINCE[head.api_key]
        self.violated = False

    def _owed(self) -> int:
        return self.throttles.owed(MUTATION, self.conn.principal, self.head.client_id)

    def admit(self) -> None:
        """Refuse the next topic when the client is already over its quota (strict versions only)."""
        if self.strict and self._owed():
            self.violated = True
            raise TopicError(ErrorCode.throttling_quota_exceeded, "The throttling quota has been exceeded.")

    def record(self, partitions: int) -> None:
        if partitions > 0:
            owed = self.throttles.record(MUTATION, self.conn.principal, self.head.client_id, partitions)
            self.violated |= not self.strict and owed > 0

    def throttle_time(self):
        """The response's throttle time (the connection is muted that long)."""
        ms = self._owed() if self.violated else 0
        if ms:
            self.conn.mute(ms)
        return throttle_time(ms)


async def _mutations(ctx: AdminContext, conn, head) -> _Mutations:
    await ctx.throttles.refresh()
    return _Mutations(ctx.throttles, conn, head)


def _over_limit(limits: TopicLimits) -> str:
    return (f"Number of partitions must be at most {limits.max_partitions} "
            "(the broker's maxNumPartitionsPerPartitionedTopic).")


@dataclass(frozen=True, slots=True)
class _Layout:
    """What a CreateTopics entry asks for: partitions, a replication factor (None: every live
    broker) and the replica lists it assigned (partition -> node ids, the preferred leader first)."""

    partitions: int
    factor: int | None
    assigned: dict[int, list[int]]


_durability_noted = False


def _note_durability(factor: int | None) -> None:
    """Say once per process that a replication factor above one changes nothing stored."""
    global _durability_noted
    if factor is not None and factor > 1 and not _durability_noted:
        _durability_noted = True
        log.info("kafka: replication factor %d accepted; it does not change durability (every write is durable "
                 "in the object store before it is acknowledged) and is reported with live brokers as replicas",
                 factor)


def _check_replicas(limits: TopicLimits, where: str, ids, live: set[int]) -> list[int]:
    """``ids`` as a replica list, or INVALID_REPLICA_ASSIGNMENT naming what is wrong with it."""
    ids = list(ids)
    if not ids:
        raise _Refused(ErrorCode.invalid_replica_assignment, f"{where}: the replica list is empty")
    if len(set(ids)) != len(ids):
        raise _Refused(ErrorCode.invalid_replica_assignment, f"{where}: a broker is named more than once in {ids}")
    unknown = sorted(set(ids) - live)
    if unknown:
        raise _Refused(ErrorCode.invalid_replica_assignment,
                       f"{where}: the assignment includes broker(s) {unknown}, but no such broker is registered")
    if len(ids) > limits.max_replication_factor:
        raise _Refused(ErrorCode.invalid_replica_assignment,
                       f"{where}: {len(ids)} replicas is more than the broker's maximum replication factor "
                       f"({limits.max_replication_factor})")
    return ids


def _layout(ctx: AdminContext, topic) -> _Layout:
    """The layout a CreateTopics entry asks for, or _Refused as Kafka refuses it.

    Storage is replicated by the object store and any broker serves any partition, so a
    replication factor is accepted whatever the number of brokers, and only reported.
    """
    limits = ctx.limits
    live = {b.node_id for b in ctx.routing.brokers()}
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Refused(ErrorCode.invalid_request, "Both numPartitions or replicationFactor and replicasAssignments "
                                                      "were set. Both cannot be used at the same time.")
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            raise _Refused(ErrorCode.invalid_replica_assignment, "Partitions should be consecutive and start from 0")
        if len(indexes) > limits.max_partitions:
            raise _Refused(ErrorCode.invalid_partitions, _over_limit(limits))
        assigned = {a.partition_index: _check_replicas(limits, f"partition {a.partition_index}", a.broker_ids, live)
                    for a in topic.assignments}
        if len({len(ids) for ids in assigned.values()}) != 1:
            raise _Refused(ErrorCode.invalid_replica_assignment, "All partitions should have the same number of replicas")
        return _Layout(len(indexes), len(assigned[0]), assigned)
    if topic.num_partitions == 0 or topic.num_partitions < -1:
        raise _Refused(ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value.")
    if topic.num_partitions > limits.max_partitions:
        raise _Refused(ErrorCode.invalid_partitions, _over_limit(limits))
    if topic.replication_factor == 0 or topic.replication_factor < -1:
        raise _Refused(ErrorCode.invalid_replication_factor,
                       "Replication factor must be larger than 0, or -1 to use the default value.")
    if topic.replication_factor > limits.max_replication_factor:
        raise _Refused(ErrorCode.invalid_replication_factor,
                       f"Replication factor {topic.replication_factor} is more than the broker's maximum "
                       f"({limits.max_replication_factor}, --max-replication-factor).")
    count = topic.num_partitions if topic.num_partitions > 0 else limits.default_partitions
    return _Layout(count, None if topic.replication_factor == -1 else topic.replication_factor, {})


async def handle_create_topics(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    config_cls = nested(cls, "CreatableTopicConfigs") if head.api_version >= 5 else None
    quota = await _mutations(ctx, conn, head)
    results = []
    for topic in req.topics:
        code, message, count, factor, configs = ErrorCode.none, None, -1, -1, ()
        try:
            if not await access.may_create(conn, topic.name):
                raise TopicError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            layout = _layout(ctx, topic)
            count, rf = layout.partitions, layout.factor
            given = validate_topic_configs((c.name, c.value) for c in topic.configs)
            if req.validate_only:
                if not valid_name(topic.name):
                    raise TopicError(17, f"invalid topic name {topic.name!r}")
                if await ctx.catalog.partition_count(topic.name) is not None:
                    raise TopicError(36, f"Topic '{topic.name}' already exists.")
            else:
                quota.admit()
                await ctx.catalog.create(topic.name, count, given, rf, layout.assigned)
                quota.record(count)
                _note_durability(rf)
            factor = rf if rf is not None else len(ctx.routing.brokers())
            layers = await ctx.configs.broker_layers()
            configs = () if config_cls is None else tuple(make(config_cls, name=r.name, value=r.value, read_only=False, config_source=r.source,
                                 is_sensitive=False)
                            for r in sorted(config_defs.resolve_topic(given, layers).values(), key=lambda r: r.name))
        except (TopicError, _Refused, ConfigRequestError) as exc:
            code, message, count = ErrorCode(exc.code), str(exc), -1
        results.append(make(nested(cls, "CreatableTopicResult"), name=topic.name, topic_id=ZERO_UUID, error_code=code,
                            error_message=message, topic_config_error_code=0, num_partitions=count,
                            replication_factor=factor, configs=configs))
    return make(cls, throttle_time=quota.throttle_time(), topics=tuple(results))


async def handle_delete_topics(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    names = [t.name for t in req.topics] if hasattr(req, "topics") else list(req.topic_names)
    quota = await _mutations(ctx, conn, head)
    results = []
    for name in names:
        code, message = ErrorCode.none, None
        try:
            if not await access.allowed(conn, TOPIC, name, DELETE):
                raise TopicError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            partitions = await ctx.catalog.partition_count(name)
            if partitions is not None:
                quota.admit()
            await ctx.catalog.delete(name)
            quota.record(partitions or 0)
        except TopicError as exc:
            code, message = ErrorCode(exc.code), str(exc)
        results.append(make(nested(cls, "DeletableTopicResult"), name=name, topic_id=ZERO_UUID, error_code=code,
                            error_message=message))
    return make(cls, throttle_time=quota.throttle_time(), responses=tuple(results))


async def handle_create_partitions(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    quota = await _mutations(ctx, conn, head)
    results = []
    for topic in req.topics:
        code, message = ErrorCode.none, None
        try:
            if not await access.allowed(conn, TOPIC, topic.name, ALTER):
                raise TopicError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            if topic.count > ctx.limits.max_partitions:
                raise TopicError(ErrorCode.invalid_partitions, _over_limit(ctx.limits))
            before = await ctx.catalog.partition_count(topic.name)
            assigned = await _new_assignments(ctx, topic, before)
            if not req.validate_only:
                if before is not None and topic.count > before:
                    quota.admit()
                await ctx.catalog.add_partitions(topic.name, topic.count, assigned)
                quota.record(topic.count - (before or topic.count))
        except (TopicError, _Refused) as exc:
            code, message = ErrorCode(exc.code), str(exc)
        results.append(make(nested(cls, "CreatePartitionsTopicResult"), name=topic.name, error_code=code,
                            error_message=message))
    return make(cls, throttle_time=quota.throttle_time(), results=tuple(results))


async def _new_assignments(ctx: AdminContext, topic, before: int | None) -> dict[int, list[int]]:
    """The replica lists a CreatePartitions entry assigns to the new partitions (index -> ids)."""
    if not topic.assignments or before is None or topic.count <= before:
        return {}  # the count's own checks answer (unknown topic, not an increase)
    added = topic.count - before
    if len(topic.assignments) != added:
        raise _Refused(ErrorCode.invalid_replica_assignment,
                       f"Increasing the number of partitions by {added} but {len(topic.assignments)} assignments "
                       "provided.")
    live = {b.node_id for b in ctx.routing.brokers()}
    assigned = {before + i: _check_replicas(ctx.limits, f"partition {before + i}", a.broker_ids, live)
                for i, a in enumerate(topic.assignments)}
    layout = (await replica_layouts(ctx.meta, [topic.name]))[topic.name]
    sizes = {len(ids) for ids in assigned.values()}
    expected = len(next(iter(layout.assigned.values()))) if layout.assigned else layout.factor
    if len(sizes) != 1 or expected is not None and sizes != {expected}:
        raise _Refused(ErrorCode.invalid_replica_assignment,
                       f"Inconsistent replication factor between partitions: the new partitions have "
                       f"{sorted(sizes)} replica(s), the topic's have {expected}.")
    return assigned


__all__ = ["handle_create_partitions", "handle_create_topics", "handle_delete_topics"]
