"""CreateTopics, DeleteTopics, CreatePartitions (topics are Pulsar partitioned topics)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ...auth.kafka_acls import ALTER, DELETE, TOPIC
from ..codec import make, nested
from ..codec.protocol import response_schema
from . import acl_api, config_defs, routing
from .catalog import TopicError, valid_name
from .cluster import NO_THROTTLE, ZERO_UUID
from .configs import ConfigRequestError, validate_topic_configs

log = logging.getLogger(__name__)


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _layout(service, topic) -> tuple[int, int | None]:
    """(partitions, replication factor or None for "every live broker") of a CreateTopics entry.

    Storage is replicated by the object store and any broker serves any partition, so
    a replication factor is only checked against the live brokers and reported.
    """
    live = {b.node_id for b in routing.brokers(service)}
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Refused(ErrorCode.invalid_request,
                           "Both numPartitions or replicationFactor and replicasAssignments were set")
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            raise _Refused(ErrorCode.invalid_replica_assignment,
                           "Partitions should be consecutive and start from 0")
        sizes = {len(a.broker_ids) for a in topic.assignments}
        for a in topic.assignments:
            if not a.broker_ids or len(set(a.broker_ids)) != len(a.broker_ids):
                raise _Refused(ErrorCode.invalid_replica_assignment,
                               f"partition {a.partition_index}: replicas must be distinct and at least one")
            unknown = sorted(set(a.broker_ids) - live)
            if unknown:
                raise _Refused(ErrorCode.invalid_replica_assignment,
                               f"partition {a.partition_index}: unknown broker id(s) {unknown}")
        if len(sizes) != 1:
            raise _Refused(ErrorCode.invalid_replica_assignment, "All partitions should have the same number of replicas")
        return len(indexes), sizes.pop()
    if topic.num_partitions == 0 or topic.num_partitions < -1:
        raise _Refused(ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value.")
    if topic.replication_factor == 0 or topic.replication_factor < -1:
        raise _Refused(ErrorCode.invalid_replication_factor,
                       "Replication factor must be larger than 0, or -1 to use the default value.")
    if topic.replication_factor > len(live):
        raise _Refused(ErrorCode.invalid_replication_factor,
                       f"Unable to replicate the partition {topic.replication_factor} time(s): the target replication"
                       f" factor of {topic.replication_factor} cannot be reached because only {len(live)} broker(s)"
                       " are registered.")
    count = topic.num_partitions if topic.num_partitions > 0 else service.default_partitions
    return count, None if topic.replication_factor == -1 else topic.replication_factor


async def handle_create_topics(conn, head, req):
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    config_cls = nested(cls, "CreatableTopicConfigs") if head.api_version >= 5 else None
    results = []
    for topic in req.topics:
        code, message, count, factor, configs = ErrorCode.none, None, -1, -1, ()
        try:
            if not await acl_api.may_create(conn, topic.name):
                raise TopicError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            count, rf = _layout(service, topic)
            given = validate_topic_configs((c.name, c.value) for c in topic.configs)
            if req.validate_only:
                if not valid_name(topic.name):
                    raise TopicError(17, f"invalid topic name {topic.name!r}")
                if await service.catalog.partition_count(topic.name) is not None:
                    raise TopicError(36, f"Topic '{topic.name}' already exists.")
            else:
                await service.catalog.create(topic.name, count, given, rf)
            factor = rf if rf is not None else len(routing.brokers(service))
            layers = await service.configs.broker_layers()
            configs = () if config_cls is None else tuple(make(config_cls, name=r.name, value=r.value, read_only=False, config_source=r.source,
                                 is_sensitive=False)
                            for r in sorted(config_defs.resolve_topic(given, layers).values(), key=lambda r: r.name))
        except (TopicError, _Refused, ConfigRequestError) as exc:
            code, message, count = ErrorCode(exc.code), str(exc), -1
        results.append(make(nested(cls, "CreatableTopicResult"), name=topic.name, topic_id=ZERO_UUID, error_code=code,
                            error_message=message, topic_config_error_code=0, num_partitions=count,
                            replication_factor=factor, configs=configs))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(results))


async def handle_delete_topics(conn, head, req):
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    names = [t.name for t in req.topics] if hasattr(req, "topics") else list(req.topic_names)
    results = []
    for name in names:
        code, message = ErrorCode.none, None
        try:
            if not await acl_api.allowed(conn, TOPIC, name, DELETE):
                raise TopicError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            await service.catalog.delete(name)
        except TopicError as exc:
            code, message = ErrorCode(exc.code), str(exc)
        results.append(make(nested(cls, "DeletableTopicResult"), name=name, topic_id=ZERO_UUID, error_code=code,
                            error_message=message))
    return make(cls, throttle_time=NO_THROTTLE, responses=tuple(results))


async def handle_create_partitions(conn, head, req):
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    results = []
    for topic in req.topics:
        code, message = ErrorCode.none, None
        try:
            if not await acl_api.allowed(conn, TOPIC, topic.name, ALTER):
                raise TopicError(ErrorCode.topic_authorization_failed, "Authorization failed.")
            if topic.assignments:
                raise TopicError(39, "manual assignments are not supported")
            if not req.validate_only:
                await service.catalog.add_partitions(topic.name, topic.count)
        except TopicError as exc:
            code, message = ErrorCode(exc.code), str(exc)
        results.append(make(nested(cls, "CreatePartitionsTopicResult"), name=topic.name, error_code=code,
                            error_message=message))
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


__all__ = ["handle_create_partitions", "handle_create_topics", "handle_delete_topics"]
