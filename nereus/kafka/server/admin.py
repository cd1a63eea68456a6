"""CreateTopics, DeleteTopics, CreatePartitions (topics are Pulsar partitioned topics)."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ..codec import make, nested
from ..codec.protocol import response_schema
from .catalog import TopicError
from .cluster import NO_THROTTLE, ZERO_UUID

log = logging.getLogger(__name__)


async def handle_create_topics(conn, head, req):
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    results = []
    for topic in req.topics:
        count = topic.num_partitions if topic.num_partitions > 0 else service.default_partitions
        code, message = ErrorCode.none, None
        if topic.replication_factor not in (-1, 1):
            code, message = ErrorCode.invalid_replication_factor, "this broker keeps one copy (replication is storage's)"
        elif topic.assignments:
            code, message = ErrorCode.invalid_replica_assignment, "manual assignments are not supported"
        else:
            try:
                if req.validate_only:
                    if await service.catalog.partition_count(topic.name) is not None:
                        raise TopicError(36, f"topic {topic.name!r} already exists")
                else:
                    await service.catalog.create(topic.name, count)
            except TopicError as exc:
                code, message = ErrorCode(exc.code), str(exc)
        results.append(make(nested(cls, "CreatableTopicResult"), name=topic.name, topic_id=ZERO_UUID, error_code=code,
                            error_message=message, topic_config_error_code=0,
                            num_partitions=count if code == ErrorCode.none else -1,
                            replication_factor=1 if code == ErrorCode.none else -1, configs=()))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(results))


async def handle_delete_topics(conn, head, req):
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    names = [t.name for t in req.topics] if hasattr(req, "topics") else list(req.topic_names)
    results = []
    for name in names:
        code, message = ErrorCode.none, None
        try:
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
