"""Group offsets committed inside a transaction (TxnOffsetCommit).

They are held pending in the metadata plane under
``/nereus/kafka/txn-offsets/{group}/{pid:020d}`` -> ``{"epoch", "offsets": [[topic,
partition, offset, leader epoch, metadata], ...]}`` until the transaction ends: the
coordinator's ``complete_group`` (registered here) writes them as the group's
committed offsets on commit and drops them on abort. Completing twice is harmless
(recovery may): the pending record is gone after the first. OffsetFetch with
``require_stable`` answers UNSTABLE_OFFSET_COMMIT for a partition with a pending
offset.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import quote

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE
from ....meta import cas
from ....transactions.records import kafka_key
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ..security import acl_api
from .group import GroupError
from ..catalog.routing import coordinates

log = logging.getLogger(__name__)

PENDING_ROOT = "/nereus/kafka/txn-offsets/"
_END = "\U0010ffff"


def _group_prefix(group_id: str) -> str:
    return PENDING_ROOT + quote(group_id, safe="") + "/"


def pending_key(group_id: str, pid: int) -> str:
    return f"{_group_prefix(group_id)}{pid:020d}"


async def pending(meta, group_id: str) -> dict[int, dict]:
    """pid -> its pending record, for every open transaction with offsets of the group."""
    prefix = _group_prefix(group_id)
    return {int(rec.key[len(prefix):]): json.loads(rec.value)
            async for rec in meta.range_scan(prefix, prefix + _END)}


async def unstable_partitions(meta, group_id: str) -> set[tuple[str, int]]:
    return {(t, p) for record in (await pending(meta, group_id)).values() for t, p, *_ in record["offsets"]}


async def complete_group(service, group_id: str, pid: int, epoch: int, commit: bool) -> None:
    """End the transaction's offsets of a group: committed offsets on commit, nothing on abort (idempotent)."""
    key = pending_key(group_id, pid)
    rec = await service.meta.get(key)
    if rec is None:
        return
    offsets = json.loads(rec.value)["offsets"]
    if commit and offsets:
        group = await service.coordinator.group(group_id)
        codes = await service.coordinator.commit_offsets(
            group, {(t, p): (o, e, m) for t, p, o, e, m in offsets}, member_commit=False)
        failed = {tp: c for tp, c in codes.items() if c}
        if failed:  # the coordinator retries the completion (recovery)
            raise RuntimeError(f"offsets of group {group_id} not written: {failed}")
    await service.meta.delete(key, expected_version_id=rec.version.version_id)
    log.debug("kafka group %s: transactional offsets of producer %d %s", group_id, pid,
              "committed" if commit else "dropped")


async def handle_txn_offset_commit(conn, head, req):
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    code = ErrorCode.none
    if not await acl_api.allowed(conn, TRANSACTIONAL_ID, req.transactional_id, WRITE):
        code = ErrorCode.transactional_id_authorization_failed
    elif not await acl_api.allowed(conn, GROUP, req.group_id, READ):
        code = ErrorCode.group_authorization_failed
    elif not coordinates(service, req.group_id):
        code = ErrorCode.not_coordinator
    elif service.transactions is None:
        code = ErrorCode.coordinator_not_available
    else:
        code = await _check_producer(service, req, head.api_version)
    generation = getattr(req, "generation_id", -1)
    if code == ErrorCode.none and generation >= 0:  # KIP-447: a member of an old generation is fenced
        try:
            group = await service.coordinator.group(req.group_id)
            code = ErrorCode(group.check_commit(req.member_id, generation, getattr(req, "group_instance_id", None)))
        except GroupError as exc:
            code = ErrorCode(exc.code)
    rows: dict[str, list] = {}
    offsets = []
    for topic in req.topics:
        topic_code = code
        if code == ErrorCode.none and not await acl_api.allowed(conn, TOPIC, topic.name, READ):
            topic_code = ErrorCode.topic_authorization_failed
        count = await service.catalog.partition_count(topic.name) if topic_code == ErrorCode.none else None
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
            await _hold(service, req.group_id, req.producer_id, req.producer_epoch, offsets)
        except Exception as exc:
            log.warning("kafka: pending offsets of group %s not written: %s", req.group_id, exc)
            rows = {name: [(i, ErrorCode.coordinator_not_available if c == ErrorCode.none else c) for i, c in parts]
                    for name, parts in rows.items()}
    topics = tuple(make(nested(cls, "TxnOffsetCommitResponseTopic"), name=name, partitions=tuple(
        make(nested(cls, "TxnOffsetCommitResponsePartition"), partition_index=i, error_code=c) for i, c in parts))
        for name, parts in rows.items())
    return make(cls, throttle_time=NO_THROTTLE, topics=topics)


async def _check_producer(service, req, version: int) -> ErrorCode:
    """The producer is the transactional id's current one and added the group (AddOffsetsToTxn)."""
    record = await service.transactions.describe(kafka_key(req.transactional_id))
    if record is None or record.producer_id != req.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if record.producer_epoch != req.producer_epoch:
        return ErrorCode.producer_fenced if version >= 3 else ErrorCode.invalid_producer_epoch
    if req.group_id not in record.groups:
        return ErrorCode.invalid_txn_state
    return ErrorCode.none


async def _hold(service, group_id: str, pid: int, epoch: int, offsets: list) -> None:
    def merge(old: bytes | None) -> bytes:
        record = json.loads(old) if old else {"epoch": epoch, "offsets": []}
        by_tp = {(t, p): [t, p, o, e, m] for t, p, o, e, m in record["offsets"]}
        by_tp.update({(t, p): [t, p, o, e, m] for t, p, o, e, m in offsets})
        return json.dumps({"epoch": epoch, "offsets": list(by_tp.values())}).encode()

    await cas.update(service.meta, pending_key(group_id, pid), merge)


__all__ = ["PENDING_ROOT", "complete_group", "handle_txn_offset_commit", "pending", "pending_key",
           "unstable_partitions"]
