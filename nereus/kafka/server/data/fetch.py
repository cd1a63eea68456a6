"""Fetch.

Stored batches are served with only the base offset and leader epoch rewritten (as
``RecordChunks``: views of the stored entries, never copied here), and
a Fetch long-polls until ``min_bytes`` are there or ``max_wait`` passed. Any broker
serves a Fetch (committed data is read from the shared storage; no append session is
taken), and a consumer of another zone is sent to a broker of its own zone (KIP-392).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import READ, TOPIC
from ....storage import StorageError
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.fetch_response import FETCH as FETCH_KEY, TOPIC_IDS_FROM, RecordChunks
from ....codec.kafka.protocol import request_schema, response_schema
from ....topics.convert import ConversionError
from ....topics.traffic import KAFKA_READS
from ..catalog.errors import kafka_error
from ..catalog.routing import NO_LEADER
from ..security import access
from ..security.quotas import FETCH, throttle_time
from ..txn import data_path as txn_data
from . import compacted, topic_ids
from .context import DataContext

log = logging.getLogger(__name__)


async def handle_fetch(ctx: DataContext, conn, head, req):
    ids: dict[str, uuid.UUID] = {}
    unknown_ids: list = []
    if head.api_version >= TOPIC_IDS_FROM:
        req, ids, unknown_ids = await _named_by_id(ctx, req)
    denied = frozenset([t.topic for t in req.topics if not await access.allowed(conn, TOPIC, t.topic, READ)])
    await ctx.throttles.refresh()
    owed = ctx.throttles.owed(FETCH, conn.principal, head.client_id)
    if owed:  # still over its consumer_byte_rate: nothing this time, and the time left (as Kafka)
        conn.mute(owed)
        return make(response_schema(head.api_key, head.api_version), throttle_time=throttle_time(owed),
                    error_code=ErrorCode.none, session_id=0, responses=())

    async def counted():
        response = await _fetch(ctx, head, req, denied, ids, unknown_ids)
        size = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
        ms = await ctx.throttles.charge(conn, FETCH, head.client_id, size)
        return dataclasses.replace(response, throttle_time=throttle_time(ms)) if ms else response

    return counted()


async def _named_by_id(ctx: DataContext, req):
    """A v13+ request (topics named by id) as one naming its topics, the id of each name, and the
    (topic id, partition indexes) of ids no topic has."""
    named_cls = request_schema(FETCH_KEY, TOPIC_IDS_FROM - 1)
    topic_cls = nested(named_cls, "FetchTopic")
    topics, ids, unknown = await topic_ids.by_name(
        ctx.catalog, req.topics, lambda t, name: make(topic_cls, topic=name, partitions=t.partitions),
        lambda t: [p.partition for p in t.partitions])
    return dataclasses.replace(req, topics=tuple(topics)), ids, unknown


@dataclasses.dataclass(frozen=True, slots=True)
class _Read:
    """What one Fetch asks of every partition."""

    cls: type  # the response schema
    max_bytes: int
    rack: str | None  # the consumer's, for KIP-392
    committed: bool  # read_committed
    denied: frozenset  # topics the principal may not read
    ids: dict  # v13+: the id of each topic named


async def _fetch(ctx: DataContext, head, req, denied: frozenset = frozenset(), ids: dict | None = None,
                 unknown_ids: list = ()):
    cls = response_schema(head.api_key, head.api_version)
    deadline = time.monotonic() + req.max_wait.total_seconds()
    # KIP-392: only consumers (not replicas) are sent to a replica near them
    replica = getattr(req, "replica_id", None)
    if replica is None:  # v15+
        replica = req.replica_state.replica_id
    read = _Read(cls, getattr(req, "max_bytes", 0x7FFFFFFF) or 0x7FFFFFFF,
                 getattr(req, "rack_id", None) if replica < 0 else None,
                 getattr(req, "isolation_level", 0) == txn_data.READ_COMMITTED, denied, ids or {})
    unknown = tuple(_unknown_topic(cls, topic_id, indexes) for topic_id, indexes in unknown_ids)
    looked = False  # whether the tail of the partitions at their end was looked at (a wait or a refresh)
    while True:
        total, topics, waits, held_at = await _fetch_once(ctx, read, req.topics)
        remaining = deadline - time.monotonic()
        if remaining <= 0 and not looked and total < req.min_bytes:
            # A partition another broker writes is only as current as this broker last
            # looked (a long poll looks while it waits); a fetch that does not wait looks now.
            stale = [p for p, _ in waits if not p.handle.writable]
            looked = True
            if stale:
                # a failed look is no error: the partition is answered as it was
                await asyncio.gather(*(p.handle.refresh() for p in stale), return_exceptions=True)
                continue
        if total >= req.min_bytes or remaining <= 0 or not waits:
            return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0,
                        responses=tuple(topics) + unknown)
        looked = True
        await _long_poll(ctx, waits, held_at, remaining)


async def _fetch_once(ctx: DataContext, read: _Read, wanted) -> tuple[int, list, list, list]:
    """One pass over the partitions: (bytes read, the topics' answers, (partition, offset) to wait
    for, stream ids held back by an open transaction)."""
    total, topics, waits, held_at = 0, [], [], []
    for ftopic in wanted:
        parts = []
        for fp in ftopic.partitions:
            data, part = await _fetch_partition(ctx, read.cls, ftopic.topic, fp, max(read.max_bytes - total, 0),
                                                first=total == 0, rack=read.rack,
                                                denied=ftopic.topic in read.denied, committed=read.committed)
            size = len(data.records)
            total += size
            parts.append(data)
            if part is not None and size == 0 and data.error_code == ErrorCode.none:
                # held back by an open transaction: woken by the next append or a look at the LSO
                held = read.committed and data.last_stable_offset <= fp.fetch_offset < data.high_watermark
                if held:
                    held_at.append(part.handle.stream_id)
                waits.append((part, data.high_watermark if held else fp.fetch_offset))
        topics.append(make(nested(read.cls, "FetchableTopicResponse"), topic=ftopic.topic,
                           topic_id=read.ids.get(ftopic.topic), partitions=tuple(parts)))
    return total, topics, waits, held_at


def _unknown_topic(cls, topic_id, indexes: list[int]):
    """The answer for a topic named by an id no topic has."""
    pcls = nested(cls, "PartitionData")
    return make(nested(cls, "FetchableTopicResponse"), topic_id=topic_id, partitions=tuple(
        _partition_data(pcls, _Asked(index), ErrorCode.unknown_topic_id) for index in indexes))


@dataclasses.dataclass(frozen=True, slots=True)
class _Asked:
    """What ``_partition_data`` reads of a partition asked for (its index)."""

    partition: int


async def _long_poll(ctx: DataContext, waits: list, held_at: list, remaining: float) -> None:
    """Wait for the first append to any of the partitions, or a change of the LSO of one held by an
    open transaction (looked at again now and then too: a change another broker made may be missed)."""
    tasks = [asyncio.ensure_future(p.handle.wait_for(offset, remaining)) for p, offset in waits]
    tasks += [asyncio.ensure_future(ctx.txns.signals.wait(stream_id, remaining)) for stream_id in held_at]
    try:
        await asyncio.wait(tasks, timeout=min(remaining, txn_data.LSO_POLL_SECONDS) if held_at else remaining,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                # the partition's next fetch reports the problem; retrieved so it is not lost
                log.debug("kafka: long poll wait failed: %s", t.exception())
            t.cancel()


def _partition_data(pcls, fp, code, hw=-1, start=-1, records=b"", replica=NO_LEADER, aborted=(), lso=None):
    # An error partition still carries a record set, an empty one, as Kafka sends it:
    # librdkafka rejects a null one (MessageSetSize -1) and then never sees the error.
    return make(pcls, partition_index=fp.partition, error_code=code, high_watermark=hw,
                last_stable_offset=hw if lso is None or code else min(lso, hw), log_start_offset=start,
                aborted_transactions=None if code else aborted, preferred_read_replica=replica,
                records=records)


async def _fetch_partition(ctx: DataContext, cls, topic: str, fp, budget: int, first: bool, rack: str | None = None,
                           denied: bool = False, committed: bool = False):
    """(partition data, the partition to long-poll or None); ``committed``: read_committed."""
    pcls = nested(cls, "PartitionData")
    if denied:
        return _partition_data(pcls, fp, ErrorCode.topic_authorization_failed), None
    part = await ctx.catalog.partition(topic, fp.partition)
    if part is None:
        return _partition_data(pcls, fp, ErrorCode.unknown_topic_or_partition), None
    handle = part.handle
    replica = ctx.routing.read_replica(str(part.topic.name), rack)
    if replica != NO_LEADER:
        # As a Kafka leader does: the replica to read from, the offsets, no records; not long-polled.
        return _partition_data(pcls, fp, ErrorCode.none, handle.next_offset(), handle.start_offset(),
                               replica=replica), None
    limit = min(fp.partition_max_bytes, budget)
    high_watermark = handle.next_offset()
    try:
        txns = await txn_data.view(ctx.txns, part, high_watermark)
    except Exception as exc:  # the transaction index is unreadable: nothing is shown past what is known stable
        log.warning("kafka: transaction view of %s-%d: %s", topic, fp.partition, exc)
        return _partition_data(pcls, fp, ErrorCode.kafka_storage_error, high_watermark, handle.start_offset()), part
    lso = txns.lso if txns is not None else high_watermark
    if fp.fetch_offset == high_watermark and handle.start_offset() <= fp.fetch_offset:  # at the end
        return _partition_data(pcls, fp, ErrorCode.none, high_watermark, handle.start_offset(), lso=lso), part
    if committed and lso <= fp.fetch_offset < high_watermark and handle.start_offset() <= fp.fetch_offset:
        # held back by an open transaction
        return _partition_data(pcls, fp, ErrorCode.none, high_watermark, handle.start_offset(), lso=lso), part
    compact = await compacted.is_compacted(ctx.configs, topic)
    log_start = await compacted.log_start(ctx.configs, topic, part) if compact else handle.start_offset()
    try:
        floor = handle.start_offset() if compact and await compacted.deletes(ctx.configs, topic) else 0
        viewed = await compacted.view_fetch(part, fp.fetch_offset, max(limit, 1), floor) if compact else None
        if viewed is not None and viewed[1] is None:  # below the key view's horizon
            return _partition_data(pcls, fp, ErrorCode.none, handle.next_offset(), log_start,
                                   RecordChunks(viewed[0]), lso=lso), part
        result = viewed[1] if viewed is not None else await handle.fetch(
            fp.fetch_offset, lso if committed else None, max_bytes=max(limit, 1))
    except StorageError as exc:
        code = kafka_error(exc)
        if code != ErrorCode.offset_out_of_range:
            log.warning("kafka: fetch %s-%d@%d failed: %s", topic, fp.partition, fp.fetch_offset, exc)
            log_start = handle.start_offset()
        return _partition_data(pcls, fp, code, handle.next_offset(), log_start, lso=lso), part
    chunks, size, served_end = _served(part, result.entries, fp, limit, first, lso if committed else None, txns)
    start = min(log_start, result.start_offset) if compact else result.start_offset
    aborted = ()
    if committed and txns is not None and chunks:
        end = min(served_end, lso)
        aborted = tuple(make(nested(cls, "AbortedTransaction"), producer_id=pid, first_offset=first)
                        for pid, first, _ in txns.aborted(fp.fetch_offset, end))
    return _partition_data(pcls, fp, ErrorCode.none, result.next_offset, start, chunks, aborted=aborted, lso=lso), part


def _served(part, entries, fp, limit: int, first: bool, lso: int | None, txns) -> tuple[RecordChunks, int, int]:
    """The fetched entries as Kafka batches within the limits: (batches, their bytes, the offset after
    the last). ``lso``: read_committed's last stable offset, where serving stops."""
    chunks, records, served_end = RecordChunks(), 0, fp.fetch_offset
    for entry in entries:
        if entry.end_offset <= fp.fetch_offset:
            continue
        if lso is not None and entry.base_offset >= lso:
            break
        try:
            batch = part.served_chunks(entry)
        except ConversionError as exc:
            log.warning("kafka: entry %d of %s-%d not convertible: %s", entry.base_offset, part.name, fp.partition,
                        exc)
            continue
        if batch is None:
            continue
        if lso is not None and txns is not None and txn_data.aborted_pulsar_entry(entry, txns):
            batch = [txn_data.as_aborted_batch(b"".join(batch), entry)]  # a converted batch: already a copy
        size = sum(len(c) for c in batch)
        # At least one batch even past the limits (KIP-74), else stop at the limit.
        if chunks and len(chunks) + size > limit or (not first and not chunks and size > limit):
            break
        chunks.extend(batch)
        served_end = entry.end_offset
        records += entry.end_offset - max(entry.base_offset, fp.fetch_offset)
    if records:
        part.topic.traffic.delivered(KAFKA_READS, records, len(chunks))
    return chunks, len(chunks), served_end


__all__ = ["handle_fetch"]
