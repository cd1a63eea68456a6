"""``OxiaMetadataStore``: the ``MetadataStore`` interface over Oxia's gRPC protocol.

Works against ``nereus oxia`` (or ``nereus standalone --oxia-port``) and any Oxia
server. It follows the namespace's shard map, routes keys with the xxh3 hash
ranges, batches concurrent writes per shard into WriteStream messages, keeps one
session per shard alive with heartbeats, streams notifications, and retries
reads and unsent writes with backoff while the server is away.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
import uuid
from typing import Any, AsyncIterator, Mapping, Sequence

import grpc

from ..api import Comparison, MetadataStore, NotificationStream, PutOp, PutResult, Record, SecondaryIndexes
from ..errors import (InvalidRequest, MetadataClosed, MetadataError, MetadataUnavailable,
                      SessionNotFound, UnexpectedVersion)
from . import convert as cv
from ._conn import RETRYABLE, Backoff, Connection, ShardInfo, error_from_rpc
from ._notify import OxiaNotificationStream
from ._reads import ShardReads
from ._writer import DELETE, DELETE_RANGE, PUT, ShardWriter
from .proto import client_pb2 as pb
from .tls import OxiaTls

log = logging.getLogger(__name__)

#: Oxia's session timeout bounds, in seconds (a server refuses sessions outside them).
MIN_SESSION_TIMEOUT, MAX_SESSION_TIMEOUT = 2.0, 300.0

_NEAREST_IS_MIN = {Comparison.CEILING: True, Comparison.HIGHER: True,
                   Comparison.FLOOR: False, Comparison.LOWER: False}


class OxiaMetadataStore(MetadataStore):
    """Client of one namespace of an Oxia-protocol server at ``address`` (host:port).

    ``retry_timeout`` bounds how long an operation waits for an unreachable server.
    ``tls``: connect over TLS with these files (``tls.py``).
    ``session_timeout`` must be within Oxia's bounds, 2 s to 5 min.
    """

    def __init__(self, address: str, namespace: str = "default", *, identity: str | None = None,
                 session_timeout: float = 15.0, retry_timeout: float = 30.0, max_inflight: int = 2,
                 tls: OxiaTls | None = None):
        if not MIN_SESSION_TIMEOUT <= session_timeout <= MAX_SESSION_TIMEOUT:
            raise InvalidRequest(f"session_timeout {session_timeout} s is outside Oxia's bounds "
                                 f"({MIN_SESSION_TIMEOUT:g} s to {MAX_SESSION_TIMEOUT:g} s)")
        super().__init__()
        self._conn = Connection(address, namespace, retry_timeout,
                                tls.channel_credentials() if tls is not None else None)
        self.namespace = namespace
        self.identity = identity or f"nereus-{uuid.uuid4().hex[:12]}"
        self.session_timeout = session_timeout
        self._max_inflight = max_inflight
        self._writers: dict[int, ShardWriter] = {}
        self._reads = ShardReads(self._conn)
        self._sessions: dict[int, int] = {}
        # time.monotonic() at which the last successful keepalive (or the create) of
        # each held session was sent: the server's deadline is at least that plus
        # the timeout, so past it the session may be gone.
        self._renewed: dict[int, float] = {}
        self._lost: set[int] = set()  # shards whose session was lost and not yet replaced
        self._closing: set[asyncio.Task[None]] = set()  # best-effort closes of lapsed sessions
        self._creating: dict[int, asyncio.Future[int]] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._heartbeats_paused = False
        self._streams: list[NotificationStream] = []
        self._closed = False

    def _check(self) -> None:
        if self._closed:
            raise MetadataClosed("metadata client is closed")

    async def _route(self, key: str, partition_key: str | None) -> ShardInfo:
        if partition_key is not None and not isinstance(partition_key, str):
            raise InvalidRequest("partition_key must be a str")
        await self._conn.ready()
        return self._conn.route(key if partition_key is None else partition_key)

    async def _shards(self, partition_key: str | None) -> list[ShardInfo]:
        if partition_key is None:
            await self._conn.ready()
            return list(self._conn.shards)
        return [await self._route("", partition_key)]

    def _write(self, shard: ShardInfo, kind: int, msg: Any, size: int) -> asyncio.Future:
        w = self._writers.get(shard.id)
        if w is None:
            w = self._writers[shard.id] = ShardWriter(self._conn, shard.id, self._max_inflight)
        return w.submit(kind, msg, size)

    # ------------------------------------------------------------------ writes
    async def put(self, key: str, value: bytes, *, expected_version_id: int | None = None,
                  partition_key: str | None = None, sequence_key_deltas: Sequence[int] | None = None,
                  ephemeral: bool = False, secondary_indexes: SecondaryIndexes | None = None) -> PutResult:
        self._check()
        cv.check_key(key)
        cv.check_value(value)
        expected = cv.check_expected(expected_version_id)
        deltas = cv.check_deltas(sequence_key_deltas, partition_key, expected)
        shard = await self._route(key, partition_key)
        msg = self._put_request(key, value, expected, partition_key, secondary_indexes,
                                await self._session(shard) if ephemeral else None)
        if deltas:
            # Alone in its request: only the server can reject a sequence, and that
            # rejection fails the whole request it is in.
            msg.sequence_key_delta.extend(deltas)
            res = await self._write_alone(shard, msg)
        else:
            res = await self._write(shard, PUT, msg, msg.ByteSize() + 8)
        result = self._put_result(shard, msg, res)
        if isinstance(result, Exception):
            raise result
        return result

    async def put_many(self, ops: Sequence[PutOp]) -> list[PutResult | Exception]:
        """Every op queued on its shard's writer at once and one wait for all (no task per op)."""
        self._check()
        await self._conn.ready()
        results: list[PutResult | Exception | None] = [None] * len(ops)
        sessions: dict[int, int] = {}
        sent = []
        for i, op in enumerate(ops):
            try:
                cv.check_key(op.key)
                shard = await self._route(op.key, op.partition_key)
                sid = None
                if op.ephemeral:
                    sid = sessions.get(shard.id)
                    if sid is None:
                        sid = sessions[shard.id] = await self._session(shard)
                msg = self._put_request(op.key, op.value, cv.check_expected(op.expected_version_id),
                                        op.partition_key, op.secondary_indexes, sid)
                sent.append((i, shard, msg, self._write(shard, PUT, msg, msg.ByteSize() + 8)))
            except MetadataError as e:
                results[i] = e
        if sent:
            await asyncio.wait([fut for *_, fut in sent])
        for i, shard, msg, fut in sent:
            results[i] = fut.exception() or self._put_result(shard, msg, fut.result())
        return results  # type: ignore[return-value]

    def _put_request(self, key: str, value: bytes, expected: int | None, partition_key: str | None,
                     secondary_indexes: SecondaryIndexes | None, session_id: int | None) -> pb.PutRequest:
        cv.check_key(key)
        msg = pb.PutRequest(key=key, value=cv.check_value(value))
        for name, secondary in _index_pairs(secondary_indexes):
            msg.secondary_indexes.add(index_name=name, secondary_key=secondary)
        if expected is not None:
            msg.expected_version_id = expected
        if partition_key is not None:
            msg.partition_key = partition_key
        if session_id is not None:
            msg.session_id = session_id
            msg.client_identity = self.identity
        return msg

    def _put_result(self, shard: ShardInfo, msg: pb.PutRequest, res: pb.PutResponse) -> PutResult | MetadataError:
        if res.status == pb.OK:
            return PutResult(res.key if res.HasField("key") else msg.key, cv.version_from_pb(res.version))
        if res.status == pb.SESSION_DOES_NOT_EXIST:
            # Expired under us: the next ephemeral put opens a new one.
            self._lose(shard.id, msg.session_id, "the server no longer has it")
            return SessionNotFound(f"session {msg.session_id} does not exist")
        return _status_error(res.status, msg.key)

    async def _write_alone(self, shard: ShardInfo, msg: pb.PutRequest) -> pb.PutResponse:
        await self._conn.ready()
        try:
            resp = await self._conn.stub(shard.leader).Write(
                pb.WriteRequest(shard=shard.id, puts=[msg]), metadata=self._conn.shard_metadata(shard.id))
        except grpc.RpcError as e:
            raise error_from_rpc(e) from None
        return resp.puts[0]

    async def delete(self, key: str, *, expected_version_id: int | None = None,
                     partition_key: str | None = None) -> bool:
        self._check()
        cv.check_key(key)
        expected = cv.check_expected(expected_version_id)
        msg = pb.DeleteRequest(key=key)
        if expected is not None:
            msg.expected_version_id = expected
        res = await self._write(await self._route(key, partition_key), DELETE, msg, len(key) + 16)
        if res.status == pb.OK:
            return True
        if res.status == pb.KEY_NOT_FOUND:
            return False
        raise _status_error(res.status, key)

    async def delete_range(self, min_key_inclusive: str, max_key_exclusive: str, *,
                           partition_key: str | None = None) -> None:
        self._check()
        cv.check_key(min_key_inclusive, "range start")
        cv.check_key(max_key_exclusive, "range end")
        msg = pb.DeleteRangeRequest(start_inclusive=min_key_inclusive, end_exclusive=max_key_exclusive)
        size = len(min_key_inclusive) + len(max_key_exclusive) + 16
        results = await asyncio.gather(*(self._write(s, DELETE_RANGE, msg, size)
                                         for s in await self._shards(partition_key)))
        for res in results:
            if res.status != pb.OK:
                raise _status_error(res.status, min_key_inclusive)

    # ------------------------------------------------------------------- reads
    async def get(self, key: str, *, comparison: Comparison = Comparison.EQUAL,
                  partition_key: str | None = None, include_value: bool = True,
                  use_index: str | None = None) -> Record | None:
        self._check()
        if not isinstance(comparison, Comparison):
            raise InvalidRequest(f"invalid comparison {comparison!r}")
        req = pb.GetRequest(key=key, include_value=include_value,
                            comparison_type=cv.COMPARISON_TO_PB[comparison])
        if use_index is not None:
            cv.check_range_bound(key)
            req.secondary_index_name = cv.check_index_name(use_index)
            return await self._get_by_index(req, comparison, partition_key)
        cv.check_key(key)
        if comparison is Comparison.EQUAL or partition_key is not None:
            return await self._get(await self._route(key, partition_key), req)
        found = [r for r in await asyncio.gather(*(self._get(s, req) for s in await self._shards(None)))
                 if r is not None]
        if not found:
            return None
        pick = min if _NEAREST_IS_MIN[comparison] else max
        return pick(found, key=lambda r: cv.encode_key(r.key))

    async def get_many(self, keys: Sequence[str], *,
                       partition_keys: Sequence[str | None] | None = None) -> list[Record | None]:
        self._check()
        routes = partition_keys if partition_keys is not None else [None] * len(keys)
        for key in keys:  # all checked before any is sent
            cv.check_key(key)
        equal = cv.COMPARISON_TO_PB[Comparison.EQUAL]
        reqs = [pb.GetRequest(key=key, include_value=True, comparison_type=equal) for key in keys]
        if any(pk is not None and not isinstance(pk, str) for pk in routes):
            raise InvalidRequest("partition_key must be a str")
        await self._conn.ready()
        route = self._conn.route
        futures = [self._reads.submit(route(key if pk is None else pk), req) for req, key, pk in zip(reqs, keys, routes)]
        out: list[Record | None] = []
        for req, res in zip(reqs, await asyncio.gather(*futures)):
            if res.status == pb.KEY_NOT_FOUND:
                out.append(None)
            elif res.status != pb.OK:
                raise _status_error(res.status, req.key)
            else:
                out.append(cv.record_from_pb(res, req.key, True))
        return out

    async def _get_by_index(self, req: pb.GetRequest, comparison: Comparison,
                            partition_key: str | None) -> Record | None:
        found = [r for r in await asyncio.gather(
            *(self._get(s, req, raw=True) for s in await self._shards(partition_key))) if r is not None]
        if not found:
            return None
        # Across shards: the nearest secondary key, then the primary key (as each shard orders them).
        pick = max if comparison in (Comparison.FLOOR, Comparison.LOWER) else min
        exact = [r for r in found if r.secondary_index_key == req.key]
        if comparison is Comparison.FLOOR and exact:
            pick, found = min, exact  # an exact FLOOR takes the first entry of that secondary key
        best = pick(found, key=lambda r: (cv.encode_key(r.secondary_index_key), cv.encode_key(r.key)))
        return cv.record_from_pb(best, best.key, req.include_value)

    async def _get(self, shard: ShardInfo, req: pb.GetRequest, *, raw: bool = False) -> Any:
        res = await self._reads.submit(shard, req)
        if res.status == pb.KEY_NOT_FOUND:
            return None
        if res.status != pb.OK:
            raise _status_error(res.status, req.key)
        return res if raw else cv.record_from_pb(res, req.key, req.include_value)

    async def _scan(self, lo: str, hi: str, partition_key: str | None, page_size: int,
                    with_values: bool, use_index: str | None = None) -> AsyncIterator[Any]:
        self._check()
        if use_index is None:
            cv.check_key(lo, "range start")
            cv.check_key(hi, "range end")
        else:
            cv.check_range_bound(lo)
            cv.check_range_bound(hi)
            cv.check_index_name(use_index)
        cv.check_page_size(page_size)
        # The server streams each shard's range in chunks (its own page size); the
        # shards are merged here by encoded key, which orders as Oxia's key order
        # (by index key, then primary key, for an index).
        its = [self._shard_scan(s, lo, hi, with_values, use_index) for s in await self._shards(partition_key)]
        heap: list[tuple[Any, int, Any]] = []
        try:
            # Every shard's first step finishes (or fails) before any error is raised, so
            # that the generators can be closed below: a running one cannot be.
            heads = await asyncio.gather(*(anext(it, None) for it in its), return_exceptions=True)
            for head in heads:
                if isinstance(head, BaseException):
                    raise head
            for i, head in enumerate(heads):
                if head is not None:
                    heap.append((head[0], i, head[1]))
            heapq.heapify(heap)
            while heap:
                _, i, item = heapq.heappop(heap)
                yield item
                nxt = await anext(its[i], None)
                if nxt is not None:
                    heapq.heappush(heap, (nxt[0], i, nxt[1]))
        finally:
            for it in its:
                await it.aclose()

    async def _shard_scan(self, shard: ShardInfo, lo: str, hi: str, with_values: bool,
                          index: str | None = None) -> AsyncIterator[tuple[Any, Any]]:
        """(sort key, item) pairs of one shard; resumes after the last one on a retry.

        An index is always read with RangeScan: its answers name each entry's
        secondary key, which the merge needs (a List answer has primary keys only).
        """
        last: Any = None
        start = lo
        deadline = time.monotonic() + self._conn.retry_timeout
        backoff = Backoff()
        while True:
            self._check()
            stub, md = self._conn.stub(shard.leader), self._conn.shard_metadata(shard.id)
            if with_values or index is not None:
                req = pb.RangeScanRequest(shard=shard.id, start_inclusive=start, end_exclusive=hi)
                if index is not None:
                    req.secondary_index_name = index
                call = stub.RangeScan(req, metadata=md)
            else:
                call = stub.List(pb.ListRequest(shard=shard.id, start_inclusive=start, end_exclusive=hi),
                                 metadata=md)
            try:
                async for resp in call:
                    for item in (resp.records if with_values or index is not None else resp.keys):
                        k = item if isinstance(item, str) else item.key
                        if index is None:
                            order: Any = cv.encode_key(k)
                        else:
                            order = (cv.encode_key(item.secondary_index_key), cv.encode_key(k))
                        if last is not None and order <= last:
                            continue  # already yielded before a retry
                        last = order
                        yield order, (cv.record_from_pb(item, k, True) if with_values else k)
                return
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE or time.monotonic() >= deadline:
                    raise error_from_rpc(e) from None
                if last is not None:  # resume at the last key seen (skipped above)
                    start = cv.decode_key(last[0] if index is not None else last)
            finally:
                call.cancel()
            await backoff.wait()

    # ----------------------------------------------------------- notifications
    def notifications(self) -> NotificationStream:
        self._check()
        stream = OxiaNotificationStream(self._conn)
        self._streams.append(stream)
        return stream

    # ---------------------------------------------------------------- sessions
    @property
    def sessions_healthy(self) -> bool:
        now = time.monotonic()
        return not self._lost and all(now - t < self.session_timeout for t in self._renewed.values())

    async def _session(self, shard: ShardInfo) -> int:
        sid = self._sessions.get(shard.id)
        if sid is not None:
            if self._within_lease(shard.id):
                return sid
            self._lose(shard.id, sid, "its lease ran out", close=True)
        pending = self._creating.get(shard.id)
        if pending is None:
            pending = asyncio.ensure_future(self._open_session(shard))
            self._creating[shard.id] = pending
            pending.add_done_callback(lambda _f: self._creating.pop(shard.id, None))
        return await asyncio.shield(pending)

    async def _open_session(self, shard: ShardInfo) -> int:
        req = pb.CreateSessionRequest(shard=shard.id, session_timeout_ms=int(self.session_timeout * 1000),
                                      client_identity=self.identity)
        sent = 0.0

        def create() -> Any:
            nonlocal sent
            sent = time.monotonic()  # of the attempt that succeeds
            # An attempt gets half the session timeout: one held up by a network cut and answered
            # after it healed would start a lease that has already run out (the lease is timed from
            # the send), and the new session would be dropped the moment it arrived.
            return self._conn.stub(shard.leader).CreateSession(req, metadata=self._conn.shard_metadata(shard.id),
                                                               timeout=max(self.session_timeout / 2, 0.05))

        resp = await self._conn.retry(create)
        self._sessions[shard.id] = resp.session_id
        self._renewed[shard.id] = sent
        self._lost.discard(shard.id)
        log.debug("client %s opened session %d on shard %d", self.identity, resp.session_id, shard.id)
        if self._heartbeat is None and not self._heartbeats_paused:
            self._heartbeat = asyncio.create_task(self._heartbeats(), name=f"oxia-heartbeat-{self.identity}")
        return resp.session_id

    async def _heartbeats(self) -> None:
        interval = max(self.session_timeout / 4, 0.05)  # several beats per timeout

        async def beat(shard_id: int, sid: int) -> None:
            sent = time.monotonic()
            try:
                await self._conn.stub(self._conn.shard(shard_id).leader).KeepAlive(
                    pb.SessionHeartbeat(shard=shard_id, session_id=sid),
                    metadata=self._conn.shard_metadata(shard_id), timeout=interval * 2)
            except (grpc.RpcError, MetadataError) as e:
                err = error_from_rpc(e) if isinstance(e, grpc.RpcError) else e
                if isinstance(err, SessionNotFound):
                    self._lose(shard_id, sid, "the server no longer has it")
                else:  # transient: the session outlives a short outage (the lease tells when not)
                    log.debug("heartbeat of session %d failed: %s", sid, err)
                return
            if self._sessions.get(shard_id) == sid:
                self._renewed[shard_id] = sent

        while True:
            await asyncio.sleep(interval)
            # Leases first: after a freeze longer than the timeout the session may be
            # gone already, and a keepalive that still succeeds must not hide it.
            for shard_id, sid in list(self._sessions.items()):
                if not self._within_lease(shard_id):
                    self._lose(shard_id, sid, "its lease ran out", close=True)
            await asyncio.gather(*(beat(s, sid) for s, sid in list(self._sessions.items())))

    def _within_lease(self, shard_id: int) -> bool:
        return time.monotonic() - self._renewed[shard_id] < self.session_timeout

    def _close_lapsed(self, shard_id: int, sid: int) -> None:
        task = asyncio.create_task(self._close_session(shard_id, sid, quiet=True))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def shard_of(self, key: str, *, partition_key: str | None = None) -> str:
        return str((await self._route(key, partition_key)).id)

    async def end_session_of(self, key: str, session_id: int, *, partition_key: str | None = None) -> bool:
        self._check()
        shard = await self._route(key, partition_key)
        try:
            await self._conn.stub(shard.leader).CloseSession(
                pb.CloseSessionRequest(shard=shard.id, session_id=session_id),
                metadata=self._conn.shard_metadata(shard.id), timeout=self._conn.retry_timeout)
        except grpc.RpcError as e:
            err = error_from_rpc(e)
            if isinstance(err, SessionNotFound):
                return False
            raise err from None
        return True

    async def _close_session(self, shard_id: int, sid: int, *, quiet: bool = False) -> None:
        try:
            await self._conn.stub(self._conn.shard(shard_id).leader).CloseSession(
                pb.CloseSessionRequest(shard=shard_id, session_id=sid),
                metadata=self._conn.shard_metadata(shard_id), timeout=5)
        except (grpc.RpcError, MetadataError) as e:
            # A lapsed session is closed on a best-effort basis: the server may have expired it.
            # One the server no longer has was ended already (expired, or ended by another client).
            err = error_from_rpc(e) if isinstance(e, grpc.RpcError) else e
            log.log(logging.DEBUG if quiet or isinstance(err, SessionNotFound) else logging.WARNING,
                    "closing session %d of %s failed: %s", sid, self.identity, err)

    def _pause_heartbeats(self) -> None:
        """Test hook: stop heartbeating, as a hung or partitioned client would."""
        self._heartbeats_paused = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    # ------------------------------------------------------------------- close
    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            # Let it finish: a loop that stops right after close() must not hold pending tasks.
            await asyncio.gather(self._heartbeat, return_exceptions=True)
            self._heartbeat = None
        for stream in self._streams:
            await stream.close()
        for w in self._writers.values():
            await w.close()
        await asyncio.gather(*self._closing, *(self._close_session(s, sid) for s, sid in self._sessions.items()))
        self._sessions.clear()
        self._renewed.clear()
        await self._conn.close()


def _index_pairs(indexes: SecondaryIndexes | None) -> list[tuple[str, str]]:
    """A put's index entries as (name, secondary key) pairs, validated as the server will."""
    if not indexes:
        return []
    pairs = list(indexes.items()) if isinstance(indexes, Mapping) else list(indexes)
    cv.check_indexes(pairs)
    return [(name, secondary) for name, secondary in pairs]


def _status_error(status: int, key: str) -> MetadataError:
    if status == pb.UNEXPECTED_VERSION_ID:
        return UnexpectedVersion(f"{key!r}: unexpected version")
    if status == pb.SESSION_DOES_NOT_EXIST:
        return SessionNotFound(f"{key!r}: session does not exist")
    return MetadataUnavailable(f"{key!r}: unexpected status {status}")
