"""Produce.

Each batch's size, compression and records are checked, then its producer sequence,
and the appends start before the next request is read; the response waits for them
(acks=1 and acks=all both mean durable here; acks=0 gets no response).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
import uuid

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import TOPIC, TRANSACTIONAL_ID, WRITE
from ....storage import StreamFenced
from ....tasks import gather_bounded, unless
from ....codec.kafka import InvalidBatch, UnsupportedMagic, make, nested, split_batches
from ....codec.kafka.batch import HEADER_SIZE, with_log_append_time
from ....codec.kafka.inflate import check_decompressed
from ....codec.kafka.produce_request import PRODUCE as PRODUCE_KEY, TOPIC_IDS_FROM
from ....codec.kafka.protocol import request_schema, response_schema
from ....codec.kafka.records import decode_records
from ..catalog.errors import kafka_error
from ..catalog.partition import DUPLICATE, NONE
from ..security import access
from ..security.quotas import PRODUCE, throttle_time
from ..txn import data_path as txn_data
from . import record_checks, topic_ids
from .context import DataContext
from .record_checks import RecordErrors

log = logging.getLogger(__name__)

COLD_LOADS_AT_ONCE = 64  # partitions of one produce request loaded at once


class _Refused(Exception):
    """A partition's produce refused before (or instead of) its appends: its outcome, (error code,
    -1, -1, message) or RecordErrors."""

    def __init__(self, outcome) -> None:
        super().__init__(outcome)
        self.outcome = outcome


async def handle_produce(ctx: DataContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    topic_cls, part_cls = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    error_cls = nested(cls, "BatchIndexAndErrorMessage") if head.api_version >= 8 else None
    results: list[tuple[str, list]] = []
    ids: dict[str, uuid.UUID | None] = {}
    unknown_ids: list = []  # (topic id, partition indexes) named by an id no topic has
    if head.api_version >= TOPIC_IDS_FROM:
        req, ids, unknown_ids = await _named_by_id(ctx, req)
    # a transactional producer writes for its transactional id: refused without WRITE on it, as Kafka does
    txn_refused = req.transactional_id is not None and not await access.allowed(
        conn, TRANSACTIONAL_ID, req.transactional_id, WRITE)
    if req.transactional_id is not None and not txn_refused:
        await txn_data.begin_request(ctx.txns, ctx.catalog, req)
    if not txn_refused:
        await _load_cold_partitions(ctx, conn, req)
    for topic in req.topic_data:
        parts = []
        results.append((topic.name, parts))
        refused = not await access.allowed(conn, TOPIC, topic.name, WRITE)  # nothing of the topic is written
        for pdata in topic.partition_data:
            if txn_refused:
                parts.append((pdata.index, (ErrorCode.transactional_id_authorization_failed, -1, -1, None)))
                continue
            parts.append((pdata.index, (ErrorCode.topic_authorization_failed, -1, -1, None) if refused
                          else await _produce_partition(ctx, topic.name, pdata, req.acks)))
    throttle_ms = await ctx.throttles.charge(conn, PRODUCE, head.client_id, sum(
        len(p.records or b"") for t in req.topic_data for p in t.partition_data))
    if req.acks == 0:
        return None

    async def respond():
        topics = []
        for name, parts in results:
            responses = []
            for index, outcome in parts:
                code, base, start, message, append_time, record_errors = await _outcome(outcome)
                stamp = datetime.datetime.fromtimestamp(append_time / 1000, datetime.timezone.utc) \
                    if append_time >= 0 else None
                errors = tuple(make(error_cls, batch_index=i, batch_index_error_message=text)
                               for i, text in record_errors) if error_cls is not None else ()
                responses.append(make(part_cls, index=index, error_code=code, base_offset=base, log_append_time=stamp,
                                      log_start_offset=start, record_errors=errors, error_message=message))
            topics.append(make(topic_cls, name=name, topic_id=ids.get(name), partition_responses=tuple(responses)))
        for topic_id, indexes in unknown_ids:
            topics.append(make(topic_cls, topic_id=topic_id, partition_responses=tuple(
                make(part_cls, index=index, error_code=ErrorCode.unknown_topic_id, base_offset=-1,
                     log_append_time=None, log_start_offset=-1, record_errors=(), error_message=None)
                for index in indexes)))
        return make(cls, responses=tuple(topics), throttle_time=throttle_time(throttle_ms))

    return respond()


async def _named_by_id(ctx: DataContext, req):
    """A v13+ request (topics named by id) as a request naming its topics, each topic's id by its
    name, and the (topic id, partition indexes) of ids no topic has (UNKNOWN_TOPIC_ID)."""
    named_cls = request_schema(PRODUCE_KEY, TOPIC_IDS_FROM - 1)
    topic_cls = nested(named_cls, "TopicProduceData")
    topics, ids, unknown = await topic_ids.by_name(
        ctx.catalog, req.topic_data, lambda t, name: topic_cls(name=name, partition_data=t.partition_data),
        lambda t: [p.index for p in t.partition_data])
    return named_cls(transactional_id=req.transactional_id, acks=req.acks, timeout=req.timeout,
                     topic_data=tuple(topics)), ids, unknown


async def _load_cold_partitions(ctx: DataContext, conn, req) -> None:
    """Load together the request's partitions this broker does not write yet, their writers taken.

    A producer's first request to a new topic names all of its partitions, and each one's
    load waits on metadata writes (the topic claimed, the append session taken): one after
    the other, that is seconds for a few hundred partitions. The appends that follow still
    start in the request's order; a failure here is met again, and answered, by that step.
    """
    catalog = ctx.catalog
    cold = [(topic.name, pdata.index) for topic in req.topic_data for pdata in topic.partition_data
            if not catalog.writing(topic.name, pdata.index)]
    if len(cold) < 2 or ctx.storage.refusal is not None:
        return

    async def load(name: str, index: int) -> None:
        if not await access.allowed(conn, TOPIC, name, WRITE):
            return
        try:
            part = await catalog.partition_to_write(name, index)
            if part is not None:
                await part.ensure_writer()
        except Exception as exc:  # answered for this partition by its produce step
            log.debug("kafka: loading %s-%d for a produce: %s", name, index, exc)

    await gather_bounded(lambda cold_one: load(*cold_one), cold, limit=COLD_LOADS_AT_ONCE)


async def _outcome(outcome):
    """(error code, base offset, log start offset, message, log append time, record errors) of a
    partition's produce."""
    if isinstance(outcome, RecordErrors):
        return outcome.code, -1, -1, outcome.message, -1, outcome.errors
    if len(outcome) == 4:
        return (*outcome, -1, ())  # failed before appending
    part, futures, append_time = outcome
    base = None
    for fut in futures:
        try:
            offset = await _unless_abandoned(fut, part) if isinstance(fut, asyncio.Future) else fut
            offset = offset.base_offset if hasattr(offset, "base_offset") else offset
        except Exception as exc:  # fenced (the topic unloads): the client refreshes metadata and retries
            code = kafka_error(exc, default=ErrorCode.kafka_storage_error)
            (log.info if code == ErrorCode.not_leader_or_follower else log.warning)(
                "kafka: append to %s-%d not committed: %s", part.name, part.index, exc)
            return code, -1, -1, str(exc), -1, ()
        base = offset if base is None else base
    return ErrorCode.none, base, part.handle.start_offset(), None, append_time, ()


async def _unless_abandoned(fut: asyncio.Future, part):
    """``fut``'s result, or StreamFenced as soon as the broker abandons the partition's topic (it
    lost its metadata session): the client then goes to the new leader instead of waiting here."""
    done, result = await unless(fut, part.topic.abandoned)
    if done:
        return result
    raise StreamFenced(f"{part.name}-{part.index}: this broker lost its metadata session")


async def _produce_partition(ctx: DataContext, topic: str, pdata, acks: int):
    """The partition's outcome: (partition, append futures, log append time) once its appends
    started, else what refused it."""
    if acks not in (0, 1, -1):
        return ErrorCode.invalid_required_acks, -1, -1, "acks must be 0, 1 or -1"
    part = await ctx.catalog.partition_to_write(topic, pdata.index)
    if part is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1, None
    refusal = ctx.storage.refusal
    if refusal is not None:  # out of space: the client retries until writes are taken again
        return ErrorCode.kafka_storage_error, -1, -1, refusal
    configs = await ctx.configs.topic(topic)
    try:
        batches, keys = _checked_batches(part, f"{topic}-{pdata.index}", pdata.records or b"", configs)
        try:
            await part.ensure_writer()
        except StreamFenced as exc:
            return kafka_error(exc), -1, -1, str(exc)
        await _check_producers(ctx, part, batches)
        append_time = -1
        if configs["message.timestamp.type"].value == "LogAppendTime":
            append_time = int(time.time() * 1000)
            batches = [with_log_append_time(data, append_time) for _, data in batches]
            keys = []  # the stamped batches are recorded as stored
        return part, _append(part, batches, keys), append_time
    except _Refused as exc:
        return exc.outcome


def _checked_batches(part, partition: str, records: bytes, configs: dict) -> tuple[list, list]:
    """The request's batches for ``partition`` ("topic-index"), each (header, data), and the keys of
    each batch of a compacted topic (decoded here anyway: its key log takes them); _Refused if
    the topic's limits or record rules refuse them."""
    max_bytes = int(configs["max.message.bytes"].value)
    keys: list = []
    try:
        batches = split_batches(records)
        for batch, _ in batches:  # Kafka's limit is per batch, as the producer sent it
            if batch.length > max_bytes:
                raise _Refused((ErrorCode.message_too_large, -1, -1,
                                f"the batch is {batch.length} bytes, more than max.message.bytes ({max_bytes})"))
        for batch, data in batches:  # what compressed records expand to is bounded (no bombs)
            check_decompressed(batch.compression, data[HEADER_SIZE:])
        compacted_topic = "compact" in configs["cleanup.policy"].value.split(",")
        rules = record_checks.RecordRules.of(configs, partition, compacted_topic)
        if compacted_topic:
            part.topic.key_log.enable()  # the builds of its views read the keys recorded at append
        if rules.needed:
            decoded_batches = [decode_records(data)[1] for _, data in batches]
            refused = rules.check(decoded_batches, int(time.time() * 1000))
            if refused is not None:  # as Kafka: the whole batch fails, naming the records at fault
                raise _Refused(refused)
            if compacted_topic:
                keys = [([r.offset_delta for r in decoded], [r.key for r in decoded],
                         [r.value is None for r in decoded], [r.timestamp for r in decoded])
                        for decoded in decoded_batches]
    except UnsupportedMagic as exc:
        raise _Refused((ErrorCode.unsupported_for_message_format, -1, -1, str(exc))) from None
    except InvalidBatch as exc:
        log.info("kafka: corrupt batch for %s: %s", partition, exc)
        raise _Refused((ErrorCode.corrupt_message, -1, -1, str(exc))) from None
    return batches, keys


async def _check_producers(ctx: DataContext, part, batches: list) -> None:
    """_Refused unless each batch's producer may append it: in sequence (or a duplicate, answered
    with its original offset), and in a transaction begun on the partition if transactional."""
    for batch, _ in batches:
        if batch.control:
            raise _Refused((ErrorCode.invalid_record, -1, -1,
                            "control batches are written by the transaction coordinator"))
        code, _ = part.check_sequence(batch)
        if code not in (NONE, DUPLICATE):
            raise _Refused((ErrorCode(code), -1, -1, None))
        if batch.transactional and code == NONE:
            txn_code, message = await txn_data.begin_batch(ctx.txns, part, batch)
            if txn_code != ErrorCode.none:
                raise _Refused((txn_code, -1, -1, message))


def _append(part, batches: list, keys: list) -> list:
    """Start the appends, in order: a future (or a duplicate's original offset) per batch."""
    futures = []
    for i, (batch, data) in enumerate(batches):
        code, original = part.check_sequence(batch)
        if code == DUPLICATE:
            if original is None:
                raise _Refused((ErrorCode.duplicate_sequence_number, -1, -1, None))
            futures.append(original)
            continue
        fut = part.append(batch, data, keys[i] if keys else None)
        part.accept(batch, fut)
        fut.add_done_callback(lambda f, b=batch: part.forget_failed(b, f) if f.cancelled() or f.exception() else None)
        futures.append(fut)
    return futures


__all__ = ["handle_produce"]
