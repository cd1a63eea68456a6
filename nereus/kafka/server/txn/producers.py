"""InitProducerId and DescribeProducers: producer ids, and the producers a partition knows.

InitProducerId without a transactional id hands out a new producer id (or, KIP-360, the
next epoch of a known one); with one, the transaction coordinator decides (``txn_api``).
"""

from __future__ import annotations

import time

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import READ, TOPIC
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ..security import access
from . import txn_api
from .context import Transactions, TxnContext


async def handle_init_producer_id(ctx: TxnContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    if req.transactional_id is not None:
        return await txn_api.init_transactional_producer(ctx, conn, head, req)
    if not await access.may_write_idempotently(conn):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    producer_id=-1, producer_epoch=-1)
    pid, epoch = getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1)
    if pid >= 0 and 0 <= epoch < 32766:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id=pid,
                    producer_epoch=epoch + 1)  # KIP-360: bump the epoch of a known producer
    pid = await ctx.producer_ids.allocate()
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, producer_id=pid, producer_epoch=0)


async def handle_describe_producers(ctx: TxnContext, conn, head, req):
    """The producers a partition knows (idempotent and transactional), with the first offset of an open transaction."""
    cls = response_schema(head.api_key, head.api_version)
    pcls, scls = nested(cls, "PartitionResponse"), nested(cls, "ProducerState")
    topics = []
    for topic in req.topics:
        readable = await access.allowed(conn, TOPIC, topic.name, READ)
        rows = []
        for index in topic.partition_indexes:
            part = await ctx.catalog.partition(topic.name, index) if readable else None
            if part is None:
                code = ErrorCode.topic_authorization_failed if not readable else ErrorCode.unknown_topic_or_partition
                rows.append(make(pcls, partition_index=index, error_code=code, error_message=None, active_producers=()))
                continue
            rows.append(make(pcls, partition_index=index, error_code=ErrorCode.none, error_message=None,
                             active_producers=tuple(make(scls, **p) for p in await _producers(ctx.txns, part))))
        topics.append(make(nested(cls, "TopicResponse"), name=topic.name, partitions=tuple(rows)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def _producers(txns: Transactions, part) -> list[dict]:
    opened = {}
    if txns.streams is not None:
        index = await txns.streams.index(part.handle.stream_id)
        opened = {pid: (first, epoch) for pid, (first, epoch) in index.open.items()}
    wall_ms, now = time.time() * 1000, part.producers.clock()
    out = {}
    for pid, state in part.producers.items():
        out[pid] = dict(producer_id=pid, producer_epoch=state.epoch, last_sequence=state.last_sequence,
                        last_timestamp=int(wall_ms - (now - state.last_used) * 1000), coordinator_epoch=-1,
                        current_txn_start_offset=opened.get(pid, (-1, -1))[0])
    for pid, (first, epoch) in opened.items():
        out.setdefault(pid, dict(producer_id=pid, producer_epoch=epoch, last_sequence=-1, last_timestamp=-1,
                                 coordinator_epoch=-1, current_txn_start_offset=first))
    return [out[pid] for pid in sorted(out)]


__all__ = ["handle_describe_producers", "handle_init_producer_id"]
