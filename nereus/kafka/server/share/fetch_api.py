"""ShareFetch and ShareAcknowledge (KIP-932): share sessions, acquisitions and acknowledgements.

Acquisitions are ``partition.py``, the broker's share sessions ``groups.py``; here topic
ids become names, the stream is read and the cursors persisted before acknowledgements
are answered.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time

from kio.schema.errors import ErrorCode

from ....ledger.entry import EntryFlags, EntryFormatError, decode_entry
from ....ledger.errors import CursorFenced
from ....storage import OffsetOutOfRange, StorageError
from ....topics.convert import ConversionError
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ....auth.kafka_acls import GROUP, READ, TOPIC
from ..security import access
from ..catalog.errors import kafka_error
from .context import ShareContext
from .groups import next_epoch
from .partition import RENEW, InvalidRecordState

log = logging.getLogger(__name__)

DEFAULT_MAX_RECORDS = 500
READ_BYTES = 1 << 20
RECORD_LIMIT = 1  # ShareFetch v2's share_acquire_mode: acquire at most max_records
CLOSE_SESSION, OPEN_SESSION = -1, 0


# -- sessions and acknowledgements ------------------------------------------------------------------
def _session(shares, req) -> tuple[object, ErrorCode]:
    """The share session the request belongs to (opened or closed as its epoch says)."""
    key = (req.group_id, req.member_id)
    if req.share_session_epoch == OPEN_SESSION:
        return shares.open_session(*key), ErrorCode.none
    session = shares.sessions.get(key)
    if req.share_session_epoch == CLOSE_SESSION:
        return session, ErrorCode.none  # already gone when the member left the group first
    if session is None:
        return None, ErrorCode.share_session_not_found
    if req.share_session_epoch != session.epoch:
        return None, ErrorCode.invalid_share_session_epoch
    session.epoch = next_epoch(session.epoch)
    return session, ErrorCode.none


async def _names(catalog, topic_ids) -> dict:
    out = {}
    for topic_id in topic_ids:
        if topic_id not in out:
            out[topic_id] = await catalog.topic_name(topic_id)
    return out


async def _refused(conn, names: dict) -> set:
    """The topic ids (of ``names``) the principal may not READ."""
    return {topic_id for topic_id, name in names.items()
            if name is not None and not await access.allowed(conn, TOPIC, name, READ)}


async def _acknowledge(ctx: ShareContext, group_id: str, member_id: str, names: dict, topics, settings,
                       refused: set = frozenset(), renew: bool = False) -> dict:
    """Apply acknowledgement batches; returns {(topic id, partition): error code} for each partition acked.

    ``renew``: the request's ``is_renew_ack`` (RENEW types are refused without it)."""
    shares = ctx.shares
    results, touched = {}, []
    for t in topics:
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            key = (t.topic_id, p.partition_index)
            if t.topic_id in refused:
                results[key] = ErrorCode.topic_authorization_failed
                continue
            name = names.get(t.topic_id)
            part = await ctx.catalog.partition(name, p.partition_index) if name else None
            if part is None:
                results[key] = ErrorCode.unknown_topic_or_partition
                continue
            sp = await shares.share_partition(group_id, name, part, settings)
            if not renew and any(RENEW in b.acknowledge_types for b in p.acknowledgement_batches):
                results[key] = ErrorCode.invalid_request
                continue
            # A lock that ran out is gone before the acknowledgement is looked at, whether or not a
            # fetch noticed it yet: the record is no longer the member's (INVALID_RECORD_STATE).
            now = time.monotonic()
            if sp.expire(now):
                touched.append((None, sp))  # persisted (an expiry may archive at the limit), not answered
            try:
                for b in p.acknowledgement_batches:
                    sp.check(member_id, b.first_offset, b.last_offset, tuple(b.acknowledge_types))
            except InvalidRecordState as exc:
                log.debug("kafka: share group %s: %s", group_id, exc)
                results[key] = ErrorCode.invalid_record_state
                continue
            for b in p.acknowledgement_batches:
                sp.acknowledge(member_id, b.first_offset, b.last_offset, tuple(b.acknowledge_types), now)
            results[key] = ErrorCode.none
            touched.append((key, sp))
    if touched:
        shares.notify()  # a release makes records available to the others
        answered = [key for key, _ in touched if key is not None]
        try:
            await shares.persist(list({id(sp): sp for _, sp in touched}.values()))
        except CursorFenced:
            for key in answered:
                results[key] = ErrorCode.not_leader_or_follower
        except Exception:
            log.exception("kafka: share group %s: acknowledgements not persisted", group_id)
            for key in answered:
                results[key] = ErrorCode.kafka_storage_error
    return results


def _leader(ctx: ShareContext, part) -> dict:
    return {"leader_id": ctx.routing.local.node_id, "leader_epoch": part.leader_epoch if part is not None else -1}


def _endpoints(ctx: ShareContext, conn, cls) -> tuple:
    """This broker's endpoint on the listener the client came in on (SSL clients get the SSL port)."""
    ecls, node_id = nested(cls, "NodeEndpoint"), ctx.routing.local.node_id
    protocol = getattr(conn, "protocol", "PLAINTEXT")
    return tuple(make(ecls, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                 for b in ctx.routing.brokers(protocol=protocol) if b.node_id == node_id)


# -- ShareFetch ----------------------------------------------------------------------------------
async def handle_share_fetch(ctx: ShareContext, conn, head, req):
    shares = ctx.shares
    cls = response_schema(head.api_key, head.api_version)
    settings = await shares.settings(req.group_id)
    lock_ms = datetime.timedelta(seconds=settings.lock_seconds)

    def fail(code: ErrorCode, message: str | None = None):
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                    acquisition_lock_timeout=lock_ms, responses=(), node_endpoints=())

    if not req.group_id or not req.member_id:
        return fail(ErrorCode.invalid_request, "group id and member id are required")
    if not await access.allowed(conn, GROUP, req.group_id, READ):
        return fail(ErrorCode.group_authorization_failed, "Group authorization failed.")
    has_acks = any(p.acknowledgement_batches for t in req.topics for p in t.partitions)
    if req.share_session_epoch == OPEN_SESSION and has_acks:
        return fail(ErrorCode.invalid_request, "a new share session carries no acknowledgements")
    session, error = _session(shares, req)
    if error != ErrorCode.none:
        return fail(error)
    names = await _names(ctx.catalog, [t.topic_id for t in (*req.topics, *req.forgotten_topics_data)])
    refused = await _refused(conn, names)
    renew = getattr(req, "is_renew_ack", False)
    acked = await _acknowledge(ctx, req.group_id, req.member_id, names, req.topics, settings, refused, renew)
    requested = {(t.topic_id, p.partition_index) for t in req.topics for p in t.partitions}
    if req.share_session_epoch == CLOSE_SESSION:
        shares.close_session(req.group_id, req.member_id)
        fetch_from = []
    elif renew:  # a renewing fetch only renews (KIP-1222): nothing new is acquired
        session.partitions |= requested
        fetch_from = []
    else:
        for t in req.forgotten_topics_data:
            for index in t.partitions:
                session.partitions.discard((t.topic_id, index))
        session.partitions |= requested
        fetch_from = sorted(session.partitions)
    return _fetch_loop(ctx, conn, cls, req, settings, names, fetch_from, requested, acked, lock_ms, refused)


async def _fetch_loop(ctx: ShareContext, conn, cls, req, settings, names, fetch_from, requested, acked, lock_ms,
                      refused):
    shares = ctx.shares
    later = {}
    for topic_id, _ in fetch_from:
        if topic_id not in names:
            names[topic_id] = later[topic_id] = await ctx.catalog.topic_name(topic_id)
    refused = refused | await _refused(conn, later)
    deadline = time.monotonic() + req.max_wait.total_seconds()
    max_records = req.max_records if req.max_records > 0 else DEFAULT_MAX_RECORDS
    max_bytes = max(req.max_bytes, 0)  # 0: nothing is acquired
    # KIP-1206: batch-optimized (0, the default) acquires whole stored batches, so a poll may exceed
    # max_records by the rest of its last batch; record-limit (1) stops at max_records exactly.
    strict = getattr(req, "share_acquire_mode", 0) == RECORD_LIMIT
    while True:
        changed = shares.changed()
        out, waits, budget, size = {}, [], max_records, 0
        acquiring: list = []  # the share-partition of each entry of ``out`` (None: none)
        for topic_id, index in fetch_from:
            if topic_id in refused:
                out[(topic_id, index)] = (ErrorCode.topic_authorization_failed, None, b"", ())
                acquiring.append(None)
                continue
            name = names.get(topic_id)
            part = await ctx.catalog.partition(name, index) if name else None
            if part is None:
                out[(topic_id, index)] = (ErrorCode.unknown_topic_or_partition, None, b"", ())
                acquiring.append(None)
                continue
            sp = await shares.share_partition(req.group_id, name, part, settings)
            acquiring.append(sp)
            code, records, ranges = await _acquire(part, sp, req.member_id, budget, max_bytes - size,
                                                   strict, await _stable_view(ctx, part, settings),
                                                   first_in_response=size == 0)
            budget -= sum(last - first + 1 for first, last, _ in ranges)
            size += len(records)
            out[(topic_id, index)] = (code, part, records, ranges)
            if not ranges:
                waits.append((part, sp))
        remaining = deadline - time.monotonic()
        got = any(v[3] for v in out.values())
        if got:
            await _save_acquired(shares, [sp for sp, (_, _, _, ranges) in zip(acquiring, out.values()) if ranges])
        if got or remaining <= 0 or not waits or budget <= 0:
            return _fetch_response(ctx, conn, cls, out, requested, acked, lock_ms)
        deadlines = [d for _, sp in waits if (d := sp.next_deadline()) is not None]
        timeout = min([remaining, *(max(d - time.monotonic(), 0.0) for d in deadlines)])
        tasks = [asyncio.ensure_future(part.handle.wait_for(part.handle.next_offset(), timeout))
                 for part, _ in waits]
        tasks.append(asyncio.ensure_future(changed.wait()))
        try:
            await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


async def _save_acquired(shares, sps: list) -> None:
    """Make the delivery counts of what was just acquired durable before it is handed out."""
    for sp in sps:
        sp.save_state()
    try:
        await shares.persist(sps)
    except CursorFenced as exc:
        log.warning("kafka: delivery counts not saved: %s", exc)


async def _stable_view(ctx: ShareContext, part, settings):
    """The partition's transaction view for a read_committed share group (None: read everything)."""
    if not settings.read_committed or ctx.txn_view is None:
        return None
    return await ctx.txn_view(part, part.handle.next_offset())


def _aborted(entry, view) -> bool:
    try:
        header, _ = decode_entry(entry.data)
    except EntryFormatError:
        return False
    return bool(header.flags & EntryFlags.TRANSACTIONAL) and view.is_aborted(header.producer_id, entry.base_offset)


async def _acquire(part, sp, member_id: str, budget: int, max_bytes: int, strict: bool = False, view=None,
                   first_in_response: bool = True):
    """(error, record batches, acquired ranges) for one share-partition.

    ``max_bytes``: what the response may still hold; a batch that does not fit is left for a later
    fetch, unless it would be the response's first (a batch larger than the limit must still get out).
    ``view``: a read_committed group's transaction view: nothing at or past its last stable offset
    is acquired, and the records of aborted transactions are archived, never delivered.
    """
    if max_bytes <= 0:  # a request for no bytes, or a response already full
        return ErrorCode.none, b"", ()
    handle = part.handle
    now = time.monotonic()
    offset = sp.first_candidate(now)
    if offset < handle.start_offset():
        sp.skip_to(handle.start_offset())
        offset = sp.first_candidate(now)
    end = handle.next_offset() if view is None else min(handle.next_offset(), view.lso)
    chunks, ranges, size, full = [], [], 0, False
    while offset < end and budget > 0 and size < max_bytes and not full:
        try:
            result = await handle.fetch(offset, max_bytes=READ_BYTES)
        except OffsetOutOfRange:
            sp.skip_to(handle.start_offset())
            return ErrorCode.none, b"", ()
        except StorageError as exc:
            log.warning("kafka: share fetch %s-%d@%d failed: %s", part.name, part.index, offset, exc)
            return kafka_error(exc), b"", ()
        if not result.entries:
            break
        for entry in result.entries:
            if entry.end_offset <= offset:
                continue
            if entry.end_offset > end:
                break  # reaches past the last stable offset
            if _is_control(entry) or (view is not None and _aborted(entry, view)):
                sp.archive_fresh(entry.base_offset, entry.end_offset)
                continue
            # The stored entry's size stands for its batch's (converted only once acquired).
            if size + len(entry.data) > max_bytes and (size or not first_in_response):
                full = True  # what is left waits for the next fetch
                break
            first = max(entry.base_offset, offset)
            got = sp.acquire(member_id, first, entry.end_offset, budget if strict else entry.end_offset - first, now)
            if got:
                try:
                    batch = part.served(entry)
                except ConversionError as exc:
                    log.warning("kafka: entry %d of %s-%d not convertible: %s", entry.base_offset, part.name,
                                part.index, exc)
                    batch = None
                if batch is not None:
                    chunks.append(batch)
                    size += len(batch)
                ranges.extend(got)
                budget -= sum(last - first + 1 for first, last, _ in got)
            if budget <= 0 or size >= max_bytes:
                break
        offset = result.entries[-1].end_offset
    if ranges:
        part.topic.traffic.delivered(sp.cursor.name, sum(b - a + 1 for a, b, _ in ranges), size)
    return ErrorCode.none, b"".join(chunks), tuple(ranges)


def _is_control(entry) -> bool:
    try:
        return bool(decode_entry(entry.data)[0].flags & EntryFlags.CONTROL)
    except EntryFormatError:
        return False


def _fetch_response(ctx: ShareContext, conn, cls, out: dict, requested: set, acked: dict, lock_ms):
    pcls, acls = nested(cls, "PartitionData"), nested(cls, "AcquiredRecords")
    lcls = nested(cls, "LeaderIdAndEpoch")
    by_topic: dict = {}
    for key in sorted(set(out) | requested | set(acked)):
        code, part, records, ranges = out.get(key, (ErrorCode.none, None, b"", ()))
        if key not in requested and key not in acked and not ranges and code == ErrorCode.none:
            continue  # incremental: only what changed
        by_topic.setdefault(key[0], []).append(make(
            pcls, partition_index=key[1], error_code=code, error_message=None,
            acknowledge_error_code=acked.get(key, ErrorCode.none), acknowledge_error_message=None,
            current_leader=make(lcls, **_leader(ctx, part)), records=records,
            acquired_records=tuple(make(acls, first_offset=a, last_offset=b, delivery_count=c) for a, b, c in ranges)))
    tcls = nested(cls, "ShareFetchableTopicResponse")
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                acquisition_lock_timeout=lock_ms,
                responses=tuple(make(tcls, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                node_endpoints=_endpoints(ctx, conn, cls))


# -- ShareAcknowledge ------------------------------------------------------------------------------
async def handle_share_acknowledge(ctx: ShareContext, conn, head, req):
    shares = ctx.shares
    cls = response_schema(head.api_key, head.api_version)

    def fail(code: ErrorCode, message: str | None = None):
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, error_message=message, responses=(),
                    node_endpoints=(), acquisition_lock_timeout=datetime.timedelta(0))

    if not req.group_id or not req.member_id:
        return fail(ErrorCode.invalid_request, "group id and member id are required")
    if not await access.allowed(conn, GROUP, req.group_id, READ):
        return fail(ErrorCode.group_authorization_failed, "Group authorization failed.")
    if req.share_session_epoch == OPEN_SESSION:
        return fail(ErrorCode.invalid_share_session_epoch, "ShareAcknowledge cannot open a share session")
    _, error = _session(shares, req)
    if error != ErrorCode.none:
        return fail(error)
    settings = await shares.settings(req.group_id)
    names = await _names(ctx.catalog, [t.topic_id for t in req.topics])
    acked = await _acknowledge(ctx, req.group_id, req.member_id, names, req.topics, settings,
                               await _refused(conn, names), getattr(req, "is_renew_ack", False))
    if req.share_session_epoch == CLOSE_SESSION:
        shares.close_session(req.group_id, req.member_id)
    pcls, lcls = nested(cls, "PartitionData"), nested(cls, "LeaderIdAndEpoch")
    by_topic: dict = {}
    for (topic_id, index), code in sorted(acked.items()):
        by_topic.setdefault(topic_id, []).append(make(
            pcls, partition_index=index, error_code=code, error_message=None,
            current_leader=make(lcls, leader_id=ctx.routing.local.node_id, leader_epoch=-1)))
    tcls = nested(cls, "ShareAcknowledgeTopicResponse")
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                responses=tuple(make(tcls, topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
                node_endpoints=_endpoints(ctx, conn, cls),
                acquisition_lock_timeout=datetime.timedelta(seconds=settings.lock_seconds))  # v2


__all__ = ["handle_share_acknowledge", "handle_share_fetch"]
