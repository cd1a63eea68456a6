"""Produce, Fetch, ListOffsets and OffsetForLeaderEpoch.

Produce checks each batch's CRC and producer sequence, then starts the appends
before the next request is read; the response waits for them (acks=1 and
acks=all both mean durable here; acks=0 gets no response). Fetch serves stored
batches with only the base offset and leader epoch rewritten, and long-polls
until ``min_bytes`` are there or ``max_wait`` passed. Any broker serves a Fetch
(committed data is read from the shared storage; no append session is taken),
and a consumer of another zone is sent to a broker of its own zone (KIP-392).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import time

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import DELETE, DESCRIBE, READ, TOPIC, TRANSACTIONAL_ID, WRITE
from ....ledger.entry import decode_entry
from ....storage import StorageError, StreamFenced, time_index
from ....tasks import unless
from ....codec.kafka import NO_THROTTLE, InvalidBatch, UnsupportedMagic, make, nested, split_batches
from ....codec.kafka.batch import HEADER_SIZE, with_log_append_time
from ....codec.kafka.inflate import check_decompressed
from ....codec.kafka.protocol import response_schema
from ....codec.kafka.records import decode_records
from ....topics.convert import ConversionError
from ....topics.traffic import KAFKA_READS
from . import compacted, record_checks
from ..security import acl_api
from ..txn import data_path as txn_data
from .record_checks import RecordErrors
from ..catalog.errors import kafka_error
from ..security.quotas import FETCH, PRODUCE, throttle_time
from ..catalog.partition import DUPLICATE, NONE
from ..catalog.routing import NO_LEADER, read_replica

log = logging.getLogger(__name__)

EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


# -- produce ---------------------------------------------------------------------------------
async def handle_produce(conn, head, req):
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    topic_cls, part_cls = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    error_cls = nested(cls, "BatchIndexAndErrorMessage") if head.api_version >= 8 else None
    results: list[tuple[str, list]] = []
    # a transactional producer writes for its transactional id: refused without WRITE on it, as Kafka does
    txn_refused = req.transactional_id is not None and not await acl_api.allowed(
        conn, TRANSACTIONAL_ID, req.transactional_id, WRITE)
    if req.transactional_id is not None and not txn_refused:
        await txn_data.begin_request(service, req)
    for topic in req.topic_data:
        parts = []
        results.append((topic.name, parts))
        refused = not await acl_api.allowed(conn, TOPIC, topic.name, WRITE)  # nothing of the topic is written
        for pdata in topic.partition_data:
            if txn_refused:
                parts.append((pdata.index, (ErrorCode.transactional_id_authorization_failed, -1, -1, None)))
                continue
            parts.append((pdata.index, (ErrorCode.topic_authorization_failed, -1, -1, None) if refused
                          else await _produce_partition(service, topic.name, pdata, req.acks)))
    throttle_ms = await _quota(conn, head, PRODUCE, sum(len(p.records or b"") for t in req.topic_data
                                                       for p in t.partition_data))
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
            topics.append(make(topic_cls, name=name, partition_responses=tuple(responses)))
        return make(cls, responses=tuple(topics), throttle_time=throttle_time(throttle_ms))

    return respond()


async def _quota(conn, head, key: str, size: int) -> int:
    """Count ``size`` bytes against the client's ``key`` quota; the throttle time in ms, for
    which the connection is muted (0: within the quota, or none)."""
    await conn.service.quotas.current()
    ms = conn.service.throttles.record(key, conn.principal, head.client_id, size)
    if ms:
        conn.mute(ms)
    return ms


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


async def _produce_partition(service, topic: str, pdata, acks: int):
    if acks not in (0, 1, -1):
        return ErrorCode.invalid_required_acks, -1, -1, "acks must be 0, 1 or -1"
    part = await service.catalog.partition_to_write(topic, pdata.index)
    if part is None:
        return ErrorCode.unknown_topic_or_partition, -1, -1, None
    refusal = service.storage.writer.health.refusal
    if refusal is not None:  # out of space: the client retries until writes are taken again
        return ErrorCode.kafka_storage_error, -1, -1, refusal
    records = pdata.records or b""
    configs = await service.configs.topic(topic)
    max_bytes = int(configs["max.message.bytes"].value)
    keys: list = []  # of each batch of a compacted topic, decoded here anyway: its key log takes them
    try:
        batches = split_batches(records)
        for batch, _ in batches:  # Kafka's limit is per batch, as the producer sent it
            if batch.length > max_bytes:
                return (ErrorCode.message_too_large, -1, -1,
                        f"the batch is {batch.length} bytes, more than max.message.bytes ({max_bytes})")
        for batch, data in batches:  # what compressed records expand to is bounded (no bombs)
            check_decompressed(batch.compression, data[HEADER_SIZE:])
        compacted_topic = "compact" in configs["cleanup.policy"].value.split(",")
        rules = record_checks.RecordRules.of(configs, f"{topic}-{pdata.index}", compacted_topic)
        if compacted_topic:
            part.topic.key_log.enable()  # the builds of its views read the keys recorded at append
        if rules.needed:
            decoded_batches = [decode_records(data)[1] for _, data in batches]
            refused = rules.check(decoded_batches, int(time.time() * 1000))
            if refused is not None:  # as Kafka: the whole batch fails, naming the records at fault
                return refused
            if compacted_topic:
                keys = [([r.offset_delta for r in decoded], [r.key for r in decoded],
                         [r.value is None for r in decoded], [r.timestamp for r in decoded])
                        for decoded in decoded_batches]
    except UnsupportedMagic as exc:
        return ErrorCode.unsupported_for_message_format, -1, -1, str(exc)
    except InvalidBatch as exc:
        log.info("kafka: corrupt batch for %s-%d: %s", topic, pdata.index, exc)
        return ErrorCode.corrupt_message, -1, -1, str(exc)
    try:
        await part.ensure_writer()
    except StreamFenced as exc:
        return kafka_error(exc), -1, -1, str(exc)
    for batch, _ in batches:
        if batch.control:
            return ErrorCode.invalid_record, -1, -1, "control batches are written by the transaction coordinator"
        code, _ = part.check_sequence(batch)
        if code not in (NONE, DUPLICATE):
            return ErrorCode(code), -1, -1, None
        if batch.transactional and code == NONE:
            txn_code, message = await txn_data.begin_batch(service, part, batch)
            if txn_code != ErrorCode.none:
                return txn_code, -1, -1, message
    append_time = -1
    if configs["message.timestamp.type"].value == "LogAppendTime":
        append_time = int(time.time() * 1000)
        batches = [with_log_append_time(data, append_time) for _, data in batches]
        keys = []  # the stamped batches are recorded as stored
    futures = []
    for i, (batch, data) in enumerate(batches):
        code, original = part.check_sequence(batch)
        if code == DUPLICATE:
            if original is None:
                return ErrorCode.duplicate_sequence_number, -1, -1, None
            futures.append(original)
            continue
        fut = part.append(batch, data, keys[i] if keys else None)
        part.accept(batch, fut)
        fut.add_done_callback(lambda f, b=batch: part.forget_failed(b, f) if f.cancelled() or f.exception() else None)
        futures.append(fut)
    return part, futures, append_time


# -- fetch -----------------------------------------------------------------------------------
async def handle_fetch(conn, head, req):
    denied = frozenset([t.topic for t in req.topics if not await acl_api.allowed(conn, TOPIC, t.topic, READ)])
    await conn.service.quotas.current()
    owed = conn.service.throttles.owed(FETCH, conn.principal, head.client_id)
    if owed:  # still over its consumer_byte_rate: nothing this time, and the time left (as Kafka)
        conn.mute(owed)
        return make(response_schema(head.api_key, head.api_version), throttle_time=throttle_time(owed),
                    error_code=ErrorCode.none, session_id=0, responses=())

    async def counted():
        response = await _fetch(conn.service, head, req, denied)
        size = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
        ms = await _quota(conn, head, FETCH, size)
        return dataclasses.replace(response, throttle_time=throttle_time(ms)) if ms else response

    return counted()


async def _fetch(service, head, req, denied: frozenset = frozenset()):
    cls = response_schema(head.api_key, head.api_version)
    deadline = time.monotonic() + req.max_wait.total_seconds()
    max_bytes = getattr(req, "max_bytes", 0x7FFFFFFF) or 0x7FFFFFFF
    # KIP-392: only consumers (not replicas) are sent to a replica near them
    rack = getattr(req, "rack_id", None) if getattr(req, "replica_id", -1) < 0 else None
    committed = getattr(req, "isolation_level", 0) == txn_data.READ_COMMITTED
    looked = False  # whether the tail of the partitions at their end was looked at (a wait or a refresh)
    while True:
        total, topics, waits, held_at = 0, [], [], []
        for ftopic in req.topics:
            parts = []
            for fp in ftopic.partitions:
                data, part = await _fetch_partition(service, cls, ftopic.topic, fp, max(max_bytes - total, 0),
                                                    first=total == 0, rack=rack, denied=ftopic.topic in denied,
                                                    committed=committed)
                size = len(data.records)
                total += size
                parts.append(data)
                if part is not None and size == 0 and data.error_code == ErrorCode.none:
                    # held back by an open transaction: woken by the next append or a look at the LSO
                    held = committed and data.last_stable_offset <= fp.fetch_offset < data.high_watermark
                    if held:
                        held_at.append(part.handle.stream_id)
                    waits.append((part, data.high_watermark if held else fp.fetch_offset))
            topics.append(make(nested(cls, "FetchableTopicResponse"), topic=ftopic.topic, partitions=tuple(parts)))
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
                        responses=tuple(topics))
        looked = True
        # Long poll: wake on the first append to any of the partitions, or a change of the LSO of one held by
        # an open transaction (looked at again now and then too: a change another broker made may be missed).
        tasks = [asyncio.ensure_future(p.handle.wait_for(offset, remaining)) for p, offset in waits]
        tasks += [asyncio.ensure_future(service.txn_signals.wait(stream_id, remaining)) for stream_id in held_at]
        try:
            await asyncio.wait(tasks, timeout=min(remaining, txn_data.LSO_POLL_SECONDS) if held_at else remaining,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                if t.done() and not t.cancelled() and t.exception() is not None:
                    # the partition's next fetch reports the problem; retrieved so it is not lost
                    log.debug("kafka: long poll wait failed: %s", t.exception())
                t.cancel()


async def _fetch_partition(service, cls, topic: str, fp, budget: int, first: bool, rack: str | None = None,
                           denied: bool = False, committed: bool = False):
    """(partition data, the partition to long-poll or None); ``committed``: read_committed."""
    pcls = nested(cls, "PartitionData")
    lso, txns = None, None

    def reply(code, hw=-1, start=-1, records=b"", replica=NO_LEADER, aborted=()):
        # An error partition still carries a record set, an empty one, as Kafka sends it:
        # librdkafka rejects a null one (MessageSetSize -1) and then never sees the error.
        return make(pcls, partition_index=fp.partition, error_code=code, high_watermark=hw,
                    last_stable_offset=hw if lso is None or code else min(lso, hw), log_start_offset=start,
                    aborted_transactions=None if code else aborted, preferred_read_replica=replica,
                    records=records)

    if denied:
        return reply(ErrorCode.topic_authorization_failed), None
    part = await service.catalog.partition(topic, fp.partition)
    if part is None:
        return reply(ErrorCode.unknown_topic_or_partition), None
    handle = part.handle
    replica = read_replica(service, str(part.topic.name), rack)
    if replica != NO_LEADER:
        # As a Kafka leader does: the replica to read from, the offsets, no records; not long-polled.
        return reply(ErrorCode.none, handle.next_offset(), handle.start_offset(), replica=replica), None
    limit = min(fp.partition_max_bytes, budget)
    high_watermark = handle.next_offset()
    try:
        txns = await txn_data.view(service, part, high_watermark)
    except Exception as exc:  # the transaction index is unreadable: nothing is shown past what is known stable
        log.warning("kafka: transaction view of %s-%d: %s", topic, fp.partition, exc)
        return reply(ErrorCode.kafka_storage_error, high_watermark, handle.start_offset()), part
    lso = txns.lso if txns is not None else high_watermark
    if fp.fetch_offset == high_watermark and handle.start_offset() <= fp.fetch_offset:
        return reply(ErrorCode.none, high_watermark, handle.start_offset()), part  # at the end
    if committed and lso <= fp.fetch_offset < high_watermark and handle.start_offset() <= fp.fetch_offset:
        return reply(ErrorCode.none, high_watermark, handle.start_offset()), part  # held back by an open transaction
    compact = await compacted.is_compacted(service, topic)
    log_start = await compacted.log_start(service, topic, part) if compact else handle.start_offset()
    try:
        floor = handle.start_offset() if compact and await compacted.deletes(service, topic) else 0
        viewed = await compacted.view_fetch(part, fp.fetch_offset, max(limit, 1), floor) if compact else None
        if viewed is not None and viewed[1] is None:  # below the key view's horizon
            return reply(ErrorCode.none, handle.next_offset(), log_start, b"".join(viewed[0])), part
        result = viewed[1] if viewed is not None else await handle.fetch(
            fp.fetch_offset, lso if committed else None, max_bytes=max(limit, 1))
    except StorageError as exc:
        code = kafka_error(exc)
        if code != ErrorCode.offset_out_of_range:
            log.warning("kafka: fetch %s-%d@%d failed: %s", topic, fp.partition, fp.fetch_offset, exc)
            log_start = handle.start_offset()
        return reply(code, handle.next_offset(), log_start), part
    chunks, size, records, served_end = [], 0, 0, fp.fetch_offset
    for entry in result.entries:
        if entry.end_offset <= fp.fetch_offset:
            continue
        if committed and entry.base_offset >= lso:
            break
        try:
            batch = part.served(entry)
        except ConversionError as exc:
            log.warning("kafka: entry %d of %s-%d not convertible: %s", entry.base_offset, topic, fp.partition, exc)
            continue
        if batch is None:
            continue
        if committed and txns is not None and txn_data.aborted_pulsar_entry(entry, txns):
            batch = txn_data.as_aborted_batch(batch, entry)
        # At least one batch even past the limits (KIP-74), else stop at the limit.
        if chunks and size + len(batch) > limit or (not first and not chunks and len(batch) > limit):
            break
        chunks.append(batch)
        size += len(batch)
        served_end = entry.end_offset
        records += entry.end_offset - max(entry.base_offset, fp.fetch_offset)
    if records:
        part.topic.traffic.delivered(KAFKA_READS, records, size)
    start = min(log_start, result.start_offset) if compact else result.start_offset
    aborted = ()
    if committed and txns is not None and chunks:
        end = min(served_end, lso)
        aborted = tuple(make(nested(cls, "AbortedTransaction"), producer_id=pid, first_offset=first)
                        for pid, first, _ in txns.aborted(fp.fetch_offset, end))
    return reply(ErrorCode.none, result.next_offset, start, b"".join(chunks), aborted=aborted), part


# -- offsets ---------------------------------------------------------------------------------
async def offset_for_timestamp(part, timestamp: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record at or after ``timestamp``; (-1, -1) if none.

    The stream's time index names where to start: one lookup, then a scan of at most
    about one mark interval of records (more only where a mark is missing).
    """
    handle = part.handle
    await handle.refresh()
    start = await time_index.before(part.service.meta, handle.stream_id, timestamp)
    offset, end = max(handle.start_offset(), start), handle.next_offset()
    best = (-1, -1)
    while offset < end:
        result = await handle.fetch(offset, end, max_bytes=4 << 20)
        if not result.entries:
            break
        for entry in result.entries:
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
                if record.timestamp >= timestamp and bheader.base_offset + record.offset_delta >= offset:
                    return bheader.base_offset + record.offset_delta, record.timestamp
        offset = result.entries[-1].end_offset
    return best


async def max_timestamp(part) -> tuple[int, int]:
    """(offset, timestamp) of the stream's newest timestamp (the first entry reaching it).

    The time index bounds the reads: the newest mark says the maximum below it, so only
    the records after it are read, and, if none is newer, the interval where the running
    maximum reached the mark's (the mark before it is below that maximum).
    """
    handle = part.handle
    start, end = handle.start_offset(), handle.next_offset()
    newest = await time_index.last(part.service.meta, handle.stream_id)
    if newest is None or newest[0] <= start:
        return await _max_timestamp_between(handle, start, end)
    marked_offset, marked_max = newest
    tail = await _max_timestamp_between(handle, marked_offset, end)
    if tail[1] > marked_max:
        return tail
    reached = max(start, await time_index.before(part.service.meta, handle.stream_id, marked_max))
    found = await _max_timestamp_between(handle, reached, marked_offset)
    if found[1] < marked_max:  # the maximum was in records trimmed since: what is left decides
        found = await _max_timestamp_between(handle, start, reached)
        found = max(found, await _max_timestamp_between(handle, reached, marked_offset), key=lambda b: b[1])
    return found if found[1] >= tail[1] else tail


async def _max_timestamp_between(handle, offset: int, end: int) -> tuple[int, int]:
    best = (-1, -1)
    while offset < end:
        result = await handle.fetch(offset, end, max_bytes=4 << 20)
        if not result.entries:
            break
        for entry in result.entries:
            header, _ = decode_entry(entry.data)
            if header.max_timestamp > best[1]:
                best = (entry.end_offset - 1, header.max_timestamp)
        offset = result.entries[-1].end_offset
    return best


async def handle_list_offsets(conn, head, req):
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    tcls, pcls = nested(cls, "ListOffsetsTopicResponse"), nested(cls, "ListOffsetsPartitionResponse")
    topics = []
    for topic in req.topics:
        parts = []
        described = await acl_api.allowed(conn, TOPIC, topic.name, DESCRIBE)
        for p in topic.partitions:
            part = await service.catalog.partition(topic.name, p.partition_index) if described else None
            if not described:
                parts.append(make(pcls, partition_index=p.partition_index, error_code=ErrorCode.topic_authorization_failed,
                                  timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            if part is None:
                parts.append(make(pcls, partition_index=p.partition_index, error_code=ErrorCode.unknown_topic_or_partition,
                                  timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            await part.handle.refresh()
            ts = -1
            if p.timestamp == EARLIEST:
                offset = await compacted.log_start(service, topic.name, part)
            elif p.timestamp == LATEST:
                offset = part.handle.next_offset()
                if getattr(req, "isolation_level", 0) == txn_data.READ_COMMITTED:
                    txns = await txn_data.view(service, part, offset)
                    offset = txns.lso if txns is not None else offset
            elif p.timestamp == MAX_TIMESTAMP:
                offset, ts = await max_timestamp(part)
            else:
                try:
                    offset, ts = await offset_for_timestamp(part, p.timestamp)
                except InvalidBatch as exc:
                    log.warning("kafka: timestamp lookup in %s-%d: %s", topic.name, p.partition_index, exc)
                    parts.append(make(pcls, partition_index=p.partition_index, error_code=ErrorCode.corrupt_message,
                                      timestamp=-1, offset=-1, leader_epoch=part.leader_epoch))
                    continue
            parts.append(make(pcls, partition_index=p.partition_index, error_code=ErrorCode.none, timestamp=ts,
                              offset=offset, leader_epoch=part.leader_epoch))
        topics.append(make(tcls, name=topic.name, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_offset_for_leader_epoch(conn, head, req):
    # Offsets are never truncated or rewritten, whoever leads: the end offset of every
    # epoch up to the current one is the current end (a client never needs to truncate).
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    topics = []
    for topic in req.topics:
        parts = []
        for p in topic.partitions:
            part = await service.catalog.partition(topic.topic, p.partition)
            if part is None:
                parts.append(make(nested(cls, "EpochEndOffset"), error_code=ErrorCode.unknown_topic_or_partition,
                                  partition=p.partition, leader_epoch=-1, end_offset=-1))
                continue
            if not part.handle.writable:
                # Another broker writes it: answer from its current end and epoch, never from an
                # older view (a lower answer than the consumer's position reads as a truncation).
                await part.handle.refresh()
                await service.catalog.leader_epoch(part.topic.name)
            if p.leader_epoch > part.leader_epoch:  # an epoch this partition never had: Kafka's undefined answer
                epoch, end = -1, -1
            else:
                epoch, end = (p.leader_epoch if p.leader_epoch >= 0 else part.leader_epoch), part.handle.next_offset()
            parts.append(make(nested(cls, "EpochEndOffset"), error_code=ErrorCode.none, partition=p.partition,
                              leader_epoch=epoch, end_offset=end))
        topics.append(make(nested(cls, "OffsetForLeaderTopicResult"), topic=topic.topic, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


async def handle_delete_records(conn, head, req):
    """Trim each partition's stream to the offset given (-1: the high watermark); answers the low watermark."""
    service = conn.service
    cls = response_schema(head.api_key, head.api_version)
    tcls, pcls = nested(cls, "DeleteRecordsTopicResult"), nested(cls, "DeleteRecordsPartitionResult")
    topics = []
    for topic in req.topics:
        parts = []
        deletable = await acl_api.allowed(conn, TOPIC, topic.name, DELETE)
        for p in topic.partitions:
            code, low = ErrorCode.none, -1
            part = await service.catalog.partition(topic.name, p.partition_index) if deletable else None
            if not deletable:
                code = ErrorCode.topic_authorization_failed
            elif part is None:
                code = ErrorCode.unknown_topic_or_partition
            else:
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
                            log.warning("kafka: delete records of %s-%d failed: %s", topic.name, p.partition_index,
                                        exc)
            parts.append(make(pcls, partition_index=p.partition_index, low_watermark=low, error_code=code))
        topics.append(make(tcls, name=topic.name, partitions=tuple(parts)))
    return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))


__all__ = ["handle_delete_records", "handle_fetch", "handle_list_offsets", "handle_offset_for_leader_epoch", "handle_produce"]
