"""TxnOffsetCommit: group offsets committed inside a transaction, held until it ends.

The producer must be the transactional id's current one and have added the group
(AddOffsetsToTxn); a member of an old generation is fenced (KIP-447). The offsets are
held by the group room (``groups/txn_offsets.py``) until the transaction's end
completes them.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE
from ....transactions.records import kafka_key
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ..groups import txn_offsets
from ..groups.members import GroupError
from ..security import access
from .context import Transactions, TxnContext

log = logging.getLogger(__name__)


async def handle_txn_offset_commit(ctx: TxnContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    code, sequence = ErrorCode.none, 0
    if not await access.allowed(conn, TRANSACTIONAL_ID, req.transactional_id, WRITE):
        code = ErrorCode.transactional_id_authorization_failed
    elif not await access.allowed(conn, GROUP, req.group_id, READ):
        code = ErrorCode.group_authorization_failed
    elif not ctx.groups.coordinates(req.group_id):
        code = ErrorCode.not_coordinator
    elif not ctx.txns.enabled:
        code = ErrorCode.coordinator_not_available
    else:
        code, sequence = await _check_producer(ctx.txns, req, head.api_version)
    generation = getattr(req, "generation_id", -1)
    if code == ErrorCode.none and generation >= 0:  # KIP-447: a member of an old generation is fenced
        try:
            group = await ctx.groups.group(req.group_id)
            code = ErrorCode(group.check_commit(req.member_id, generation, getattr(req, "group_instance_id", None)))
        except GroupError as exc:
            code = ErrorCode(exc.code)
    rows: dict[str, list] = {}
    offsets = []
    for topic in req.topics:
        topic_code = code
        if code == ErrorCode.none and not await access.allowed(conn, TOPIC, topic.name, READ):
            topic_code = ErrorCode.topic_authorization_failed
        count = await ctx.catalog.partition_count(topic.name) if topic_code == ErrorCode.none else None
        for p in topic.partitions:
            pcode = topic_code
            if pcode == ErrorCode.none and (count is None or not 0 <= p.partition_index < count):
                pcode = ErrorCode.unknown_topic_or_partition
            if pcode == ErrorCode.none:
                offsets.append([topic.name, p.partition_index, p.committed_offset,
                                getattr(p, "committed_leader_epoch", -1), p.committed_metadata])
            rows.setdefault(topic.name, []).append((p.partition_index, pcode))
    if offsets:
        try:
            await txn_offsets.hold(ctx.meta, req.group_id, req.producer_id, req.producer_epoch, offsets, sequence)
        except Exception as exc:
            log.warning("kafka: pending offsets of group %s not written: %s", req.group_id, exc)
            rows = {name: [(i, ErrorCode.coordinator_not_available if c == ErrorCode.none else c) for i, c in parts]
                    for name, parts in rows.items()}
    topics = tuple(make(nested(cls, "TxnOffsetCommitResponseTopic"), name=name, partitions=tuple(
        make(nested(cls, "TxnOffsetCommitResponsePartition"), partition_index=i, error_code=c) for i, c in parts))
        for name, parts in rows.items())
    return make(cls, throttle_time=NO_THROTTLE, topics=topics)


async def _check_producer(txns: Transactions, req, version: int) -> tuple[ErrorCode, int]:
    """(error, the transaction's sequence number): the producer is the transactional id's current
    one and added the group (AddOffsetsToTxn)."""
    record = await txns.coordinator.describe(kafka_key(req.transactional_id))
    if record is None or record.producer_id != req.producer_id:
        return ErrorCode.invalid_producer_id_mapping, 0
    if record.producer_epoch != req.producer_epoch:
        return ErrorCode.producer_fenced if version >= 3 else ErrorCode.invalid_producer_epoch, 0
    if req.group_id not in record.groups:
        return ErrorCode.invalid_txn_state, 0
    return ErrorCode.none, record.sequence


__all__ = ["handle_txn_offset_commit"]
