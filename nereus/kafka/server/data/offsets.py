"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords, and the time lookups of ListOffsets."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import DELETE, DESCRIBE, TOPIC
from ....ledger.entry import decode_entry
from ....storage import StorageError, time_index
from ....codec.kafka import NO_THROTTLE, InvalidBatch, make, nested
from ....codec.kafka.protocol import response_schema
from ....codec.kafka.records import decode_records
from ....topics.convert import ConversionError
from ..catalog.errors import kafka_error
from ..security import access
from ..txn import data_path as txn_data
from . import compacted
from .context import DataContext

log = logging.getLogger(__name__)

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3
# ListOffsets v8+ (KIP-405, KIP-1005): the first offset on the broker's own disk and the last one
# moved to remote storage. Every record is in the object store and none is on a local disk that a
# tier would empty: the first is the log start, and nothing was tiered (-1), as for a Kafka topic
# without remote storage.
EARLIEST_LOCAL, LATEST_TIERED = -4, -5


async def offset_for_timestamp(part, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record at or after ``timestamp``; (-1, -1) if none.

    The stream's time index names where to start: one lookup, then a scan of at most
    about one mark interval of records (more only where a mark is missing).
    """
    handle = part.handle
    await handle.refresh()
    start = await time_index.before(part.meta, handle.stream_id, timestamp)
    offset, end = max(handle.start_offset(), start), handle.next_offset()
    async for entry in _entries_between(handle, offset, end):
        header, _ = decode_entry(entry.data)
        if header.max_timestamp < timestamp and header.max_timestamp >= 0:
            continue
        try:
            batch = part.served(entry)
        except ConversionError as exc:  # as Fetch does: an entry Kafka cannot show is skipped
            log.warning("kafka: entry %d of %s-%d not convertible: %s", entry.base_offset, part.name,
                        part.index, exc)
            continue
        if batch is None:
            continue
        bheader, records = decode_records(batch)  # InvalidBatch: answered CORRUPT_MESSAGE
        for record in records:
            # The first entry read may begin before ``offset``: its earlier records do not count.
            if record.timestamp >= timestamp and bheader.base_offset + record.offset_delta >= offset:
                return bheader.base_offset + record.offset_delta, record.timestamp
    return -1, -1


async def max_timestamp(part) -> tuple[int, int]:
    """(offset, timestamp) of the stream's newest timestamp (the first entry reaching it).

    The time index bounds the reads: the newest mark says the maximum below it, so only
    the records after it are read, and, if none is newer, the interval where the running
    maximum reached the mark's (the mark before it is below that maximum).
    """
    handle = part.handle
    start, end = handle.start_offset(), handle.next_offset()
    newest = await time_index.last(part.meta, handle.stream_id)
    if newest is None or newest[0] <= start:
        return await _max_timestamp_between(part, start, end)
    marked_offset, marked_max = newest
    tail = await _max_timestamp_between(part, marked_offset, end)
    if tail[1] > marked_max:
        return tail
    reached = max(start, await time_index.before(part.meta, handle.stream_id, marked_max))
    found = await _max_timestamp_between(part, reached, marked_offset)
    if found[1] < marked_max:  # the maximum was in records trimmed since: what is left decides
        found = await _max_timestamp_between(part, start, reached)
        found = max(found, await _max_timestamp_between(part, reached, marked_offset), key=lambda b: b[1])
    return found if found[1] >= tail[1] else tail


async def _entries_between(handle, offset: int, end: int):
    """The stored entries of ``[offset, end)``, read 4 MiB at a time."""
    while offset < end:
        result = await handle.fetch(offset, end, max_bytes=4 << 20)
        if not result.entries:
            break
        for entry in result.entries:
            yield entry
        offset = result.entries[-1].end_offset


async def _max_timestamp_between(part, offset: int, end: int) -> tuple[int, int]:
    best, best_entry = (-1, -1), None
    async for entry in _entries_between(part.handle, offset, end):
        header, _ = decode_entry(entry.data)
        if header.max_timestamp > best[1]:
            best, best_entry = (entry.end_offset - 1, header.max_timestamp), entry
    if best_entry is None:
        return best
    return _offset_reaching(part, best_entry, best[1]), best[1]


def _offset_reaching(part, entry, timestamp: int) -> int:
    """The offset of the entry's first record stamped ``timestamp`` (Kafka answers that record since
    3.8, not its batch's last); a batch whose records do not carry it (log-append time) answers its first."""
    try:
        batch = part.served(entry)
    except ConversionError:
        return entry.end_offset - 1
    if batch is None:
        return entry.end_offset - 1
    try:
        header, records = decode_records(batch)
    except InvalidBatch:
        return entry.end_offset - 1
    for record in records:
        if record.timestamp == timestamp:
            return header.base_offset + record.offset_delta
    return header.base_offset


async def _answer_partitions(ctx: DataContext, conn, head, req, operation, names: tuple[str, str], answer,
                             unanswered: dict):
    """The response to a request naming partitions by topic (ListOffsets, DeleteRecords).

    ``answer(topic, p, part)`` gives the fields of a partition found; one the client may not
    reach (``operation`` on its topic) or that does not exist gets ``unanswered``'s fields.
    """
    cls = response_schema(head.api_key, head.api_version)
    tcls, pcls = nested(cls, names[0]), nested(cls, names[1])
    topics = []
    for topic in req.topics:
        parts = []
        allowed = await access.allowed(conn, TOPIC, topic.name, operation)
        for p in topic.partitions:
            part = await ctx.catalog.partition(topic.name, p.partition_index) if allowed else None
            if not allowed:
                fields = dict(unanswered, error_code=ErrorCode.topic_authorization_failed)
            elif part is None:
                fields = dict(unanswered, error_code=ErrorCode.unknown_topic_or_partition)
            else:
                fields = await answer(topic, p, part)
            parts.append(make(pcls, partition_index=p.partition_index, **fields))
        topics.append(make(tcls, name=topic.name, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_list_offsets(ctx: DataContext, conn, head, req):
    async def answer(topic, p, part) -> dict:
        await part.handle.refresh()
        ts = -1
        if p.timestamp in (EARLIEST, EARLIEST_LOCAL):
            offset = await compacted.log_start(ctx.configs, topic.name, part)
        elif p.timestamp == LATEST_TIERED:
            return dict(error_code=ErrorCode.none, timestamp=-1, offset=-1, leader_epoch=-1)
        elif p.timestamp == LATEST:
            offset = part.handle.next_offset()
            if getattr(req, "isolation_level", 0) == txn_data.READ_COMMITTED:
                txns = await txn_data.view(ctx.txns, part, offset)
                offset = txns.lso if txns is not None else offset
        elif p.timestamp == MAX_TIMESTAMP:
            offset, ts = await max_timestamp(part)
        else:
            try:
                offset, ts = await offset_for_timestamp(part, p.timestamp)
            except InvalidBatch as exc:
                log.warning("kafka: timestamp lookup in %s-%d: %s", topic.name, p.partition_index, exc)
                return dict(error_code=ErrorCode.corrupt_message, timestamp=-1, offset=-1,
                            leader_epoch=part.leader_epoch)
        return dict(error_code=ErrorCode.none, timestamp=ts, offset=offset, leader_epoch=part.leader_epoch)

    return await _answer_partitions(ctx, conn, head, req, DESCRIBE,
                                    ("ListOffsetsTopicResponse", "ListOffsetsPartitionResponse"), answer,
                                    dict(timestamp=-1, offset=-1, leader_epoch=-1))


async def handle_offset_for_leader_epoch(ctx: DataContext, conn, head, req):
    # Offsets are never truncated or rewritten, whoever leads: the end offset of every
    # epoch up to the current one is the current end (a client never needs to truncate).
    cls = response_schema(head.api_key, head.api_version)
    topics = []
    for topic in req.topics:
        parts = []
        for p in topic.partitions:
            part = await ctx.catalog.partition(topic.topic, p.partition)
            if part is None:
                parts.append(make(nested(cls, "EpochEndOffset"), error_code=ErrorCode.unknown_topic_or_partition,
                                  partition=p.partition, leader_epoch=-1, end_offset=-1))
                continue
            if not part.handle.writable:
                # Another broker writes it: answer from its current end and epoch, never from an
                # older view (a lower answer than the consumer's position reads as a truncation).
                await part.handle.refresh()
                await ctx.catalog.leader_epoch(part.topic.name)
            if p.leader_epoch > part.leader_epoch:  # an epoch this partition never had: Kafka's undefined answer
                epoch, end = -1, -1
            else:
                epoch, end = (p.leader_epoch if p.leader_epoch >= 0 else part.leader_epoch), part.handle.next_offset()
            parts.append(make(nested(cls, "EpochEndOffset"), error_code=ErrorCode.none, partition=p.partition,
                              leader_epoch=epoch, end_offset=end))
        topics.append(make(nested(cls, "OffsetForLeaderTopicResult"), topic=topic.topic, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_delete_records(ctx: DataContext, conn, head, req):
    """Trim each partition's stream to the offset given (-1: the high watermark); answers the low watermark."""
    async def answer(topic, p, part) -> dict:
        code, low = ErrorCode.none, -1
        await part.handle.refresh()
        end = part.handle.next_offset()
        target = end if p.offset == -1 else p.offset
        if not 0 <= target <= end:
            code = ErrorCode.offset_out_of_range
        else:
            try:
                await part.handle.trim(target)
                low = part.handle.start_offset()
                log.info("kafka: records of %s-%d below %d deleted", topic.name, p.partition_index, low)
            except StorageError as exc:
                code = kafka_error(exc)
                if code != ErrorCode.offset_out_of_range:
                    log.warning("kafka: delete records of %s-%d failed: %s", topic.name, p.partition_index, exc)
        return dict(low_watermark=low, error_code=code)

    return await _answer_partitions(ctx, conn, head, req, DELETE,
                                    ("DeleteRecordsTopicResult", "DeleteRecordsPartitionResult"), answer,
                                    dict(low_watermark=-1))


__all__ = ["handle_delete_records", "handle_list_offsets", "handle_offset_for_leader_epoch", "max_timestamp",
           "offset_for_timestamp"]
