"""Transaction requests: InitProducerId (transactional), AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
WriteTxnMarkers, DescribeTransactions and ListTransactions.

The protocol-neutral coordinator (``nereus.transactions``) keeps the state; these
handlers map the Kafka requests onto it and its errors onto Kafka codes. A
transactional id is served by the ring's broker for ``txn:{id}`` (FindCoordinator
key type 1); another broker answers NOT_COORDINATOR and the client looks again.
Partitions are named in the coordinator by their stream names (``str(TopicName)``),
as the catalog maps (topic, index).
"""

from __future__ import annotations

import datetime
import logging
import re
import time

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import CLUSTER, DESCRIBE, GROUP, READ, TOPIC, TRANSACTIONAL_ID, WRITE
from ....transactions import errors as txn_errors
from ....transactions.records import kafka_key as key_of  # the coordinator record key of a transactional id
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ..security import access
from .context import TxnContext

log = logging.getLogger(__name__)

CLUSTER_ACTION = 9  # Kafka's AclOperation for broker-to-broker requests
DEFAULT_TIMEOUT_MS = 60_000
SETTLE_SECONDS = 10.0  # how long a request waits for the previous transaction's markers before CONCURRENT_TRANSACTIONS


def error_code(exc: Exception, version_fenced: bool = True) -> ErrorCode:
    """The Kafka code of a coordinator error; ``version_fenced``: the request version knows PRODUCER_FENCED."""
    if isinstance(exc, txn_errors.ProducerFenced):
        return ErrorCode.producer_fenced if version_fenced else ErrorCode.invalid_producer_epoch
    for cls, code in ((txn_errors.InvalidTxnState, ErrorCode.invalid_txn_state),
                      (txn_errors.ConcurrentTransactions, ErrorCode.concurrent_transactions),
                      (txn_errors.InvalidProducerIdMapping, ErrorCode.invalid_producer_id_mapping),
                      (txn_errors.InvalidTransactionTimeout, ErrorCode.invalid_transaction_timeout),
                      (txn_errors.TransactionNotFound, ErrorCode.invalid_producer_id_mapping)):
        if isinstance(exc, cls):
            return code
    log.warning("kafka: transaction request failed: %s", exc, exc_info=not isinstance(exc, OSError))
    return ErrorCode.coordinator_not_available


async def _refusal(ctx: TxnContext, conn, transactional_id: str, operation: int = WRITE) -> ErrorCode | None:
    """The error a transactional id's request gets before reaching the coordinator, or None."""
    if not transactional_id:
        return ErrorCode.invalid_request
    if not await access.allowed(conn, TRANSACTIONAL_ID, transactional_id, operation):
        return ErrorCode.transactional_id_authorization_failed
    if not ctx.routing.is_txn_coordinator(transactional_id):
        return ErrorCode.not_coordinator
    if not ctx.txns.enabled:
        return ErrorCode.coordinator_not_available
    return None


async def _settled(ctx: TxnContext, key: str, call):
    """``call()``; if the previous transaction is still completing here, once more after it completed."""
    try:
        return await call()
    except txn_errors.ConcurrentTransactions:
        await ctx.txns.coordinator.settle(key, SETTLE_SECONDS)
        return await call()


async def init_transactional_producer(ctx: TxnContext, conn, head, req):
    """InitProducerId with a transactional id: a new producer id, or the next epoch of the id's one."""
    cls = response_schema(head.api_key, head.api_version)

    def reply(code, pid=-1, epoch=-1):
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, producer_id=pid, producer_epoch=epoch)

    refused = await _refusal(ctx, conn, req.transactional_id)
    if refused is not None:
        return reply(refused)
    timeout_ms = int(req.transaction_timeout.total_seconds() * 1000) if req.transaction_timeout else DEFAULT_TIMEOUT_MS
    try:
        pid, epoch = await ctx.txns.coordinator.init_producer(
            req.transactional_id, timeout_ms, getattr(req, "producer_id", -1), getattr(req, "producer_epoch", -1))
    except Exception as exc:
        return reply(error_code(exc, head.api_version >= 4))
    return reply(ErrorCode.none, pid, epoch)


async def _stream_names(catalog, topics) -> dict[tuple[str, int], str | None]:
    """(topic, index) -> the partition's stream name; None for a partition that does not exist."""
    out = {}
    for name, indexes in topics:
        count = await catalog.partition_count(name)
        streams = await catalog.streams(name, count) if count is not None else []
        for index in indexes:
            out[(name, index)] = str(streams[index]) if 0 <= index < len(streams) else None
    return out


async def _add_partitions(ctx: TxnContext, conn, tid: str, pid: int, epoch: int, topics, fenced_code: bool) -> dict:
    """(topic, index) -> error code of adding them to the transaction (all or none are added)."""
    wanted = [(t.name, tuple(t.partitions)) for t in topics]
    codes: dict[tuple[str, int], ErrorCode] = {}
    refused = await _refusal(ctx, conn, tid)
    if refused is None:
        for name, indexes in wanted:
            if not await access.allowed(conn, TOPIC, name, WRITE):
                codes.update({(name, i): ErrorCode.topic_authorization_failed for i in indexes})
    names = await _stream_names(ctx.catalog, wanted) if refused is None else {}
    for tp, stream in names.items():
        if stream is None and tp not in codes:
            codes[tp] = ErrorCode.unknown_topic_or_partition
    everything = [(name, i) for name, indexes in wanted for i in indexes]
    if refused is not None or codes:
        # Kafka adds all or nothing: the partitions without their own error were not attempted
        return {tp: refused or codes.get(tp, ErrorCode.operation_not_attempted) for tp in everything}
    try:
        await _settled(ctx, key_of(tid), lambda: ctx.txns.coordinator.add_partitions(
            key_of(tid), pid, epoch, sorted(set(names.values()))))
        code = ErrorCode.none
    except Exception as exc:
        code = error_code(exc, fenced_code)
    return dict.fromkeys(everything, code)


def _topic_results(cls, codes: dict) -> tuple:
    by_topic: dict[str, list] = {}
    for (name, index), code in codes.items():
        by_topic.setdefault(name, []).append(make(nested(cls, "AddPartitionsToTxnPartitionResult"),
                                                  partition_index=index, partition_error_code=code))
    return tuple(make(nested(cls, "AddPartitionsToTxnTopicResult"), name=name, results_by_partition=tuple(rows))
                 for name, rows in by_topic.items())


async def handle_add_partitions_to_txn(ctx: TxnContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    if head.api_version <= 3:
        codes = await _add_partitions(ctx, conn, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                      req.v3_and_below_producer_epoch, req.v3_and_below_topics, head.api_version >= 2)
        return make(cls, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=_topic_results(cls, codes))
    # v4+: the batched form brokers send; verify_only asks whether the partitions are in the transaction
    if not await access.allowed(conn, CLUSTER, access.CLUSTER_NAME, CLUSTER_ACTION):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    results_by_transaction=())
    results = []
    for txn in req.transactions:
        if txn.verify_only:
            codes = await _verify_partitions(ctx, txn)
        else:
            codes = await _add_partitions(ctx, conn, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                                          True)
        results.append(make(nested(cls, "AddPartitionsToTxnResult"), transactional_id=txn.transactional_id,
                            topic_results=_topic_results(cls, codes)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, results_by_transaction=tuple(results))


async def _verify_partitions(ctx: TxnContext, txn) -> dict:
    wanted = [(t.name, tuple(t.partitions)) for t in txn.topics]
    names = await _stream_names(ctx.catalog, wanted)
    codes = {}
    for tp, stream in names.items():
        if stream is None:
            codes[tp] = ErrorCode.unknown_topic_or_partition
            continue
        try:
            await ctx.txns.coordinator.verify(txn.producer_id, txn.producer_epoch, stream)
            codes[tp] = ErrorCode.none
        except Exception as exc:
            codes[tp] = error_code(exc)
    return codes


async def handle_add_offsets_to_txn(ctx: TxnContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)

    def reply(code):
        return make(cls, throttle_time=NO_THROTTLE, error_code=code)

    refused = await _refusal(ctx, conn, req.transactional_id)
    if refused is not None:
        return reply(refused)
    if not await access.allowed(conn, GROUP, req.group_id, READ):
        return reply(ErrorCode.group_authorization_failed)
    try:
        key = key_of(req.transactional_id)
        await _settled(ctx, key, lambda: ctx.txns.coordinator.add_groups(key, req.producer_id, req.producer_epoch,
                                                                        req.group_id))
    except Exception as exc:
        return reply(error_code(exc, head.api_version >= 2))
    return reply(ErrorCode.none)


async def handle_end_txn(ctx: TxnContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)

    def reply(code):
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, producer_id=-1, producer_epoch=-1)

    refused = await _refusal(ctx, conn, req.transactional_id)
    if refused is not None:
        return reply(refused)
    try:
        # answered at the decision; the markers follow (the next transaction's first request waits for them)
        await ctx.txns.coordinator.end(key_of(req.transactional_id), req.producer_id, req.producer_epoch, req.committed,
                                     wait=False)
    except Exception as exc:
        return reply(error_code(exc, head.api_version >= 2))
    return reply(ErrorCode.none)


async def handle_write_txn_markers(ctx: TxnContext, conn, head, req):
    """Markers a coordinator on another broker asks this partition leader to write (broker to broker)."""
    cls = response_schema(head.api_key, head.api_version)
    allowed = await access.allowed(conn, CLUSTER, access.CLUSTER_NAME, CLUSTER_ACTION)
    results = []
    for marker in req.markers:
        topics = []
        for topic in marker.topics:
            names = await _stream_names(ctx.catalog, [(topic.name, tuple(topic.partition_indexes))])
            rows = []
            for index in topic.partition_indexes:
                stream = names[(topic.name, index)]
                if not allowed:
                    code = ErrorCode.cluster_authorization_failed
                elif stream is None:
                    code = ErrorCode.unknown_topic_or_partition
                elif not ctx.txns.enabled:
                    code = ErrorCode.coordinator_not_available
                else:
                    try:
                        # a Nereus coordinator's coordinator epoch is the transaction's sequence number
                        await ctx.txns.participants.complete_partition(
                            stream, marker.producer_id, marker.producer_epoch, marker.transaction_result,
                            sequence=max(marker.coordinator_epoch, 0), forward=False)
                        code = ErrorCode.none
                    except Exception as exc:
                        log.info("kafka: marker for %s-%d not written: %s", topic.name, index, exc)
                        code = ErrorCode.not_leader_or_follower
                rows.append(make(nested(cls, "WritableTxnMarkerPartitionResult"), partition_index=index,
                                 error_code=code))
            topics.append(make(nested(cls, "WritableTxnMarkerTopicResult"), name=topic.name, partitions=tuple(rows)))
        results.append(make(nested(cls, "WritableTxnMarkerResult"), producer_id=marker.producer_id,
                            topics=tuple(topics)))
    return make(cls, markers=tuple(results))


# Kafka's names of the coordinator states, as DescribeTransactions and ListTransactions show them
STATE_NAMES = {"EMPTY": "Empty", "ONGOING": "Ongoing", "PREPARE_COMMIT": "PrepareCommit",
               "PREPARE_ABORT": "PrepareAbort", "COMPLETE_COMMIT": "CompleteCommit",
               "COMPLETE_ABORT": "CompleteAbort", "PREPARE_EPOCH_FENCE": "PrepareEpochFence", "DEAD": "Dead"}


def _state_name(record) -> str:
    state = getattr(record.state, "name", str(record.state))
    return STATE_NAMES.get(state, state)


def _topic_data(catalog, partitions: list[str]) -> dict[str, list[int]]:
    """Stream names -> {Kafka topic: [indexes]} (streams of other namespaces are left out)."""
    out: dict[str, list[int]] = {}
    for stream in partitions:
        found = catalog.kafka_partition(stream)
        if found is not None:
            out.setdefault(found[0], []).append(found[1])
    return out


async def handle_describe_transactions(ctx: TxnContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    scls = nested(cls, "TransactionState")
    out = []
    for tid in req.transactional_ids:
        def empty(code):
            return make(scls, error_code=code, transactional_id=tid, transaction_state="",
                        transaction_timeout=datetime.timedelta(0),
                        transaction_start_time=datetime.datetime.fromtimestamp(0, datetime.timezone.utc),
                        producer_id=-1, producer_epoch=-1, topics=())
        refused = await _refusal(ctx, conn, tid, DESCRIBE)
        if refused is not None:
            out.append(empty(refused))
            continue
        try:
            record = await ctx.txns.coordinator.describe(key_of(tid))
        except Exception as exc:
            out.append(empty(error_code(exc)))
            continue
        if record is None:
            out.append(empty(ErrorCode.transactional_id_not_found))
            continue
        topics = _topic_data(ctx.catalog, list(record.partitions))
        started = datetime.datetime.fromtimestamp(record.start_ms / 1000 if record.start_ms and record.start_ms > 0
                                                  else 0, datetime.timezone.utc)
        out.append(make(scls, error_code=ErrorCode.none, transactional_id=tid, transaction_state=_state_name(record),
                        transaction_timeout=datetime.timedelta(milliseconds=record.timeout_ms),
                        transaction_start_time=started, producer_id=record.producer_id,
                        producer_epoch=record.producer_epoch,
                        topics=tuple(make(nested(cls, "TopicData"), topic=name, partitions=tuple(sorted(indexes)))
                                     for name, indexes in sorted(topics.items()))))
    return make(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(out))


async def handle_list_transactions(ctx: TxnContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    known = {v: k for k, v in STATE_NAMES.items()}
    wanted = [known[s] for s in req.state_filters if s in known]
    unknown = tuple(s for s in req.state_filters if s not in known)
    if not ctx.txns.enabled:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.coordinator_not_available,
                    unknown_state_filters=unknown, transaction_states=())
    if req.state_filters and not wanted:
        records = []
    else:
        records = await ctx.txns.coordinator.list(states=tuple(wanted), pids=tuple(req.producer_id_filters))
    pattern = getattr(req, "transactional_id_pattern", None)
    min_age = getattr(req, "duration_filter", -1)
    now_ms = int(time.time() * 1000)
    rows = []
    for record in records:
        if not record.key.startswith("kafka:"):
            continue  # a Pulsar transaction has no transactional id
        tid = record.key[len("kafka:"):]
        if not ctx.routing.is_txn_coordinator(tid):
            continue  # each broker lists the ids it coordinates; clients ask every broker
        if pattern and not _matches(pattern, tid):
            continue
        if min_age is not None and min_age >= 0 and (not record.start_ms or now_ms - record.start_ms < min_age):
            continue
        if not await access.allowed(conn, TRANSACTIONAL_ID, tid, DESCRIBE):
            continue
        rows.append(make(nested(cls, "TransactionState"), transactional_id=tid, producer_id=record.producer_id,
                         transaction_state=_state_name(record)))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, unknown_state_filters=unknown,
                transaction_states=tuple(rows))


def _matches(pattern: str, value: str) -> bool:
    try:
        return re.fullmatch(pattern, value) is not None
    except re.error:
        return False


__all__ = ["error_code", "handle_add_offsets_to_txn", "handle_add_partitions_to_txn", "handle_describe_transactions",
           "handle_end_txn", "handle_list_transactions", "handle_write_txn_markers", "init_transactional_producer",
           "key_of"]
