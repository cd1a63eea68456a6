"""``nereus oxia``: the embedded metadata engine served over Oxia's client protocol.

Any Oxia client can use it: shard maps (one leader, this server, for every shard;
keys routed with xxh3 hash ranges as in ``nereus.meta.keys``), batched writes
(unary and streamed), reads with key comparisons, list and range scans, sessions
with ephemeral records, notifications and sequence updates.

Requests name their shard by global id (see ``directory``); the ``namespace``
gRPC header, when sent, must agree. Per-operation outcomes use Oxia's ``Status``;
whole-request failures use gRPC status codes (INVALID_ARGUMENT for malformed
requests, NOT_FOUND for unknown sessions and namespaces, FAILED_PRECONDITION for
unknown shards, UNAVAILABLE when the engine cannot serve).

Every namespace costs shard threads and files, so clients cannot conjure them
without bound: the ones that exist (``default``, those configured at start, those
created in earlier runs) are served, and at most ``max_namespaces`` more are created
on demand; a request for any other is answered as Oxia answers an unknown namespace.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import re
import signal
import socket
import time
from typing import Any, AsyncIterator, Iterable

import grpc
from grpc import aio

from ..api import Comparison, NotificationType
from ..embedded import DEFAULT_NAMESPACE, Engine, Namespace
from ..embedded.shard import Shard
from ..embedded.store import (CLOSE_SESSION, CREATE_SESSION, DELETE, DELETE_RANGE, GET, GET_INDEX, LIST,
                              LIST_INDEX, PUT)
from ..errors import (InvalidRequest, MetadataError, NamespaceNotFound, SessionNotFound,
                      UnexpectedVersion)
from ..keys import encode_key
from ...net_limits import ConnectionLimits
from . import convert as cv
from .directory import ShardDirectory
from .proto import client_pb2 as pb
from .proto import service as pbg
from .guard import OxiaGuard
from .tls import OxiaTls

log = logging.getLogger(__name__)

LIST_CHUNK = 1000  # keys per ListResponse
SCAN_PAGE = 256  # records fetched from the shard at a time
SCAN_BYTES = 1 << 20  # soft size limit of one RangeScanResponse
#: Oxia's bounds of a session timeout (2 s to 5 min): outside them CreateSession fails.
MIN_SESSION_MS, MAX_SESSION_MS = 2_000, 300_000
_MAX_SEQ = 2**64 - 1
_SEQ_SUFFIX = re.compile(r"(?:-\d{20})+")
DEFAULT_MAX_NAMESPACES = 16  # created on demand by clients, beyond those that exist


class UnknownShard(MetadataError):
    """The request names a shard this server does not have."""


_CODES: list[tuple[type, grpc.StatusCode, str | None]] = [
    (UnknownShard, grpc.StatusCode.FAILED_PRECONDITION, None),
    (SessionNotFound, grpc.StatusCode.NOT_FOUND, cv.SESSION_NOT_FOUND),
    (NamespaceNotFound, grpc.StatusCode.NOT_FOUND, cv.NAMESPACE_NOT_FOUND),
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT, None),
    (MetadataError, grpc.StatusCode.UNAVAILABLE, None),  # closed, unavailable, overflow
]


async def _abort(context: aio.ServicerContext, exc: MetadataError) -> None:
    for cls, code, details in _CODES:
        if isinstance(exc, cls):
            await context.abort(code, details or f"{type(exc).__name__}: {exc}")


def _unary(fn):
    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            return await fn(self, request, context)
        except MetadataError as e:
            await _abort(context, e)

    return wrapper


def _stream(fn):
    @functools.wraps(fn)
    async def wrapper(self, request, context):
        try:
            async for msg in fn(self, request, context):
                yield msg
        except MetadataError as e:
            await _abort(context, e)

    return wrapper


def _header(context: aio.ServicerContext, name: str) -> str | None:
    for k, v in context.invocation_metadata() or ():
        if k == name:
            return v if isinstance(v, str) else v.decode()
    return None


def _opt(msg: Any, field: str) -> Any:
    return getattr(msg, field) if msg.HasField(field) else None


class NamespaceLimit:
    """Which namespaces clients may use: the existing ones, and up to ``max_new`` more."""

    def __init__(self, directory: ShardDirectory, existing: Iterable[str], max_new: int):
        if max_new < 0:
            raise ValueError("max_new must be >= 0")
        self._directory = directory
        self._existing = {DEFAULT_NAMESPACE, *existing}
        self._created: set[str] = set()
        self.max_new = max_new

    def admit(self, name: str) -> None:
        """Allow ``name`` (counting it if it is new); NamespaceNotFound beyond the limit."""
        if name in self._existing or name in self._created or self._directory.known(name):
            return
        if len(self._created) >= self.max_new:
            log.warning("refusing to create namespace %r: %d namespaces were created on demand already",
                        name, self.max_new)
            raise NamespaceNotFound(name)
        self._created.add(name)


class OxiaServicer:
    """Oxia's ``OxiaClient`` service on top of an ``Engine``."""

    def __init__(self, engine: Engine, leader: str, *, namespaces: Iterable[str] = (),
                 max_namespaces: int = DEFAULT_MAX_NAMESPACES):
        self.engine = engine
        self.directory = ShardDirectory(engine)
        self.namespaces = NamespaceLimit(self.directory, namespaces, max_namespaces)
        self.leader = leader
        self.stopping = asyncio.Event()

    def _resolve(self, shard_id: int | None, context: aio.ServicerContext) -> tuple[Namespace, Shard]:
        if shard_id is None:
            header = _header(context, cv.SHARD_HEADER)
            if header is None or not header.isdigit():
                raise InvalidRequest("the request names no shard")
            shard_id = int(header)
        ns_name = _header(context, cv.NAMESPACE_HEADER)
        found = self.directory.shard(shard_id, ns_name)
        if found is None:
            raise UnknownShard(f"oxia: node is not leader for shard {shard_id}")
        return found

    # ------------------------------------------------------------ shard map
    @_stream
    async def GetShardAssignments(self, request, context) -> AsyncIterator[pb.ShardAssignments]:
        name = request.namespace or _header(context, cv.NAMESPACE_HEADER) or DEFAULT_NAMESPACE
        self.namespaces.admit(name)
        yield self.directory.assignments(name, self.leader)
        await self.stopping.wait()  # the map never changes: hold the stream open

    # --------------------------------------------------------------- writes
    def _submit_writes(self, shard: Shard, req: pb.WriteRequest) -> list[asyncio.Future]:
        """Validate every operation, then queue them all (in order) on the shard."""
        ops: list[tuple] = []
        for p in req.puts:
            ekey = cv.check_key(p.key)
            expected = cv.check_expected(_opt(p, "expected_version_id"))
            pk = _opt(p, "partition_key")
            deltas = cv.check_deltas(list(p.sequence_key_delta) or None, pk, expected)
            indexes = cv.check_indexes([(i.index_name, i.secondary_key) for i in p.secondary_indexes])
            sid = p.session_id if p.HasField("session_id") else 0
            ops.append((PUT, p.key, ekey, cv.check_value(p.value), expected, sid, p.client_identity, deltas,
                        indexes))
        for d in req.deletes:
            ops.append((DELETE, d.key, cv.check_key(d.key), cv.check_expected(_opt(d, "expected_version_id"))))
        for r in req.delete_ranges:
            ops.append((DELETE_RANGE, r.start_inclusive, r.end_exclusive,
                        cv.check_key(r.start_inclusive, "range start"), cv.check_key(r.end_exclusive, "range end")))
        return [shard.call(*op) for op in ops]

    @staticmethod
    async def _write_response(req: pb.WriteRequest, futs: list[asyncio.Future]) -> pb.WriteResponse:
        results = await asyncio.gather(*futs, return_exceptions=True)
        resp = pb.WriteResponse()
        it = iter(results)
        for p in req.puts:
            r = next(it)
            if isinstance(r, BaseException):
                resp.puts.add(status=_status(r))
            elif r.key != p.key:  # a sequence key: tell the client what was stored
                resp.puts.add(status=pb.OK, version=cv.version_to_pb(r.version), key=r.key)
            else:
                resp.puts.add(status=pb.OK, version=cv.version_to_pb(r.version))
        for _ in req.deletes:
            r = next(it)
            resp.deletes.add(status=_status(r) if isinstance(r, BaseException)
                             else pb.OK if r else pb.KEY_NOT_FOUND)
        for _ in req.delete_ranges:
            r = next(it)
            resp.delete_ranges.add(status=_status(r) if isinstance(r, BaseException) else pb.OK)
        return resp

    @_unary
    async def Write(self, request, context) -> pb.WriteResponse:
        _, shard = self._resolve(_opt(request, "shard"), context)
        return await self._write_response(request, self._submit_writes(shard, request))

    async def WriteStream(self, request_iterator, context) -> AsyncIterator[pb.WriteResponse]:
        # Requests are queued on their shard as they arrive (the next batch goes in
        # while the previous one commits); responses go back in request order.
        pending: asyncio.Queue = asyncio.Queue(maxsize=256)

        async def pump() -> None:
            try:
                async for req in request_iterator:
                    _, shard = self._resolve(_opt(req, "shard"), context)
                    await pending.put((req, self._submit_writes(shard, req)))
                await pending.put(None)
            except BaseException as e:  # hand any failure to the responder, in order
                await pending.put(e)

        task = asyncio.create_task(pump())
        try:
            while True:
                item = await pending.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield await self._write_response(*item)
        except MetadataError as e:
            await _abort(context, e)
        finally:
            task.cancel()

    # ---------------------------------------------------------------- reads
    @_stream
    async def Read(self, request, context) -> AsyncIterator[pb.ReadResponse]:
        _, shard = self._resolve(_opt(request, "shard"), context)
        ops = []
        for g in request.gets:
            cmp = cv.PB_TO_COMPARISON.get(g.comparison_type)
            if cmp is None:
                raise InvalidRequest(f"unknown comparison type {g.comparison_type}")
            if g.HasField("secondary_index_name"):
                ops.append((GET_INDEX, cv.check_index_name(g.secondary_index_name),
                            cv.check_range_bound(g.key), cmp, g.include_value))
            else:
                ops.append((GET, cv.check_key(g.key), cmp, g.include_value))
        results = await asyncio.gather(*(shard.read(*op) for op in ops))
        resp = pb.ReadResponse()
        for res in results:
            if res is None:
                resp.gets.add(status=pb.KEY_NOT_FOUND)
            elif isinstance(res, tuple):  # by index: the primary key's record and the entry's secondary key
                msg = cv.record_to_pb(res[0])
                msg.secondary_index_key = res[1]
                resp.gets.append(msg)
            else:
                resp.gets.append(cv.record_to_pb(res))
        yield resp

    def _scan_args(self, request, context) -> tuple[Shard, bytes, bytes, str | None]:
        _, shard = self._resolve(_opt(request, "shard"), context)
        if request.HasField("secondary_index_name"):
            # Index ranges are over secondary keys, which may be as long as a request allows.
            return (shard, cv.check_range_bound(request.start_inclusive),
                    cv.check_range_bound(request.end_exclusive), cv.check_index_name(request.secondary_index_name))
        return (shard, cv.check_key(request.start_inclusive, "range start"),
                cv.check_key(request.end_exclusive, "range end"), None)

    @staticmethod
    async def _index_pages(shard: Shard, index: str, start: bytes, end: bytes, page_size: int,
                           with_values: bool) -> AsyncIterator[list[tuple]]:
        after = None
        while True:
            page = await shard.call(LIST_INDEX, index, start, end, after, page_size, with_values)
            if page:
                yield page
                after = page[-1][:2]
            if len(page) < page_size:
                return

    @_stream
    async def List(self, request, context) -> AsyncIterator[pb.ListResponse]:
        shard, start, end, index = self._scan_args(request, context)
        if index is not None:  # the primary keys of the index entries, in index order
            async for page in self._index_pages(shard, index, start, end, LIST_CHUNK, False):
                yield pb.ListResponse(keys=[e[3] for e in page])
            return
        while True:
            page = await shard.call(LIST, start, end, LIST_CHUNK, False)
            if page:
                yield pb.ListResponse(keys=[k for _, k in page])
            if len(page) < LIST_CHUNK:
                return
            start = page[-1][0] + b"\x00"  # the smallest encoded key after the last one

    @_stream
    async def RangeScan(self, request, context) -> AsyncIterator[pb.RangeScanResponse]:
        shard, start, end, index = self._scan_args(request, context)
        resp, size = pb.RangeScanResponse(), 0
        if index is not None:
            # Records of the index entries in index order; each names its secondary key
            # too, so that a client can merge the shards in index order.
            async for page in self._index_pages(shard, index, start, end, SCAN_PAGE, True):
                for _, _, secondary, rec in page:
                    msg = cv.record_to_pb(rec)
                    msg.secondary_index_key = secondary
                    resp.records.append(msg)
                    size += len(rec.key) + len(rec.value or b"") + len(secondary) + 64
                    if size >= SCAN_BYTES:
                        yield resp
                        resp, size = pb.RangeScanResponse(), 0
            if len(resp.records):
                yield resp
            return
        while True:
            page = await shard.call(LIST, start, end, SCAN_PAGE, True)
            for _, rec in page:
                resp.records.append(cv.record_to_pb(rec))
                size += len(rec.key) + len(rec.value or b"") + 64
                if size >= SCAN_BYTES:
                    yield resp
                    resp, size = pb.RangeScanResponse(), 0
            if len(page) < SCAN_PAGE:
                break
            start = page[-1][0] + b"\x00"
        if len(resp.records):
            yield resp

    # ------------------------------------------------------------- sessions
    @_unary
    async def CreateSession(self, request, context) -> pb.CreateSessionResponse:
        _, shard = self._resolve(request.shard, context)
        if not MIN_SESSION_MS <= request.session_timeout_ms <= MAX_SESSION_MS:
            # Oxia answers its own code 109, which Python gRPC cannot send: the standard
            # code closest to it, with Oxia's message and the bounds.
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"{cv.INVALID_SESSION_TIMEOUT}: timeoutMs={request.session_timeout_ms}, "
                                f"must be between {MIN_SESSION_MS} and {MAX_SESSION_MS}")
        sid = await shard.call(CREATE_SESSION, request.session_timeout_ms, request.client_identity)
        log.debug("session %d on shard %s for %r", sid, shard.name, request.client_identity)
        return pb.CreateSessionResponse(session_id=sid)

    @_unary
    async def KeepAlive(self, request, context) -> pb.KeepAliveResponse:
        _, shard = self._resolve(request.shard, context)
        if not shard.sessions.keepalive(request.session_id):
            raise SessionNotFound(request.session_id)
        return pb.KeepAliveResponse()

    @_unary
    async def CloseSession(self, request, context) -> pb.CloseSessionResponse:
        _, shard = self._resolve(request.shard, context)
        shard.sessions.closed(request.session_id)  # no expiry race with the close below
        await shard.call(CLOSE_SESSION, request.session_id)
        return pb.CloseSessionResponse()

    # -------------------------------------------------------- change feeds
    @_stream
    async def GetNotifications(self, request, context) -> AsyncIterator[pb.NotificationBatch]:
        ns, shard = self._resolve(request.shard, context)
        sub = ns.hub.subscribe(shard.index)
        # This server keeps no notification log: a resumed stream starts from now,
        # with offsets that keep increasing from the one the client last saw.
        offset = request.start_offset_exclusive if request.HasField("start_offset_exclusive") else 0
        try:
            # The first (empty) batch tells the client the subscription is in place.
            yield pb.NotificationBatch(shard=request.shard, offset=offset, timestamp=time.time_ns() // 10**6)
            while True:
                notes = await sub.next_batch()
                if not notes:
                    return
                batch = None
                for n in notes:
                    if batch is None or n.key in batch.notifications:  # a key once per batch
                        if batch is not None:
                            yield batch
                        offset += 1
                        batch = pb.NotificationBatch(shard=request.shard, offset=offset,
                                                     timestamp=time.time_ns() // 10**6)
                    msg = batch.notifications[n.key]
                    msg.type = cv.NOTIFICATION_TO_PB[n.type]
                    if n.version_id is not None:
                        msg.version_id = n.version_id
                    if n.key_range_end is not None:
                        msg.key_range_last = n.key_range_end
                yield batch
        finally:
            await sub.close()

    @_stream
    async def GetSequenceUpdates(self, request, context) -> AsyncIterator[pb.GetSequenceUpdatesResponse]:
        ns, shard = self._resolve(request.shard, context)
        prefix = request.key
        cv.check_key(prefix)
        sub = ns.hub.subscribe(shard.index)  # before reading the current value: no gap
        try:
            last: bytes | None = None
            cur = await shard.call(GET, encode_key(f"{prefix}-{_MAX_SEQ:020d}"), Comparison.LOWER, False)
            if cur is not None and _SEQ_SUFFIX.fullmatch(cur.key, len(prefix)) and cur.key.startswith(prefix):
                last = encode_key(cur.key)
                yield pb.GetSequenceUpdatesResponse(highest_sequence_key=cur.key)
            while True:
                notes = await sub.next_batch()
                if not notes:
                    return
                best = None  # several updates in one batch collapse into the highest
                for n in notes:
                    if (n.type is NotificationType.KEY_CREATED and n.key.startswith(prefix)
                            and _SEQ_SUFFIX.fullmatch(n.key, len(prefix))):
                        ek = encode_key(n.key)
                        if last is None or ek > last:
                            last, best = ek, n.key
                if best is not None:
                    yield pb.GetSequenceUpdatesResponse(highest_sequence_key=best)
        finally:
            await sub.close()


def _status(exc: BaseException) -> int:
    if isinstance(exc, UnexpectedVersion):
        return pb.UNEXPECTED_VERSION_ID
    if isinstance(exc, SessionNotFound):
        return pb.SESSION_DOES_NOT_EXIST
    raise exc  # not a per-operation outcome: fails the whole request


# ------------------------------------------------------------------ server
class OxiaServer:
    """A running Oxia-protocol server; ``address`` is what clients should dial."""

    def __init__(self, server: aio.Server, servicer: OxiaServicer, port: int, address: str, guard=None):
        self._server = server
        self.servicer = servicer
        self.port = port
        self.address = address
        self._guard = guard  # the public port's connection limits in front of gRPC (guard.py)

    async def stop(self, grace: float = 1.0) -> None:
        """Stop accepting calls; open calls get ``grace`` seconds. The engine stays open."""
        self.servicer.stopping.set()
        if self._guard is not None:
            await self._guard.stop()
        await self._server.stop(grace)

    async def wait_for_termination(self) -> None:
        await self._server.wait_for_termination()


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


async def start_oxia_server(engine: Engine, host: str = "127.0.0.1", port: int = 6648, *,
                            advertised_address: str | None = None, namespaces: Iterable[str] = (),
                            max_namespaces: int = DEFAULT_MAX_NAMESPACES, tls: OxiaTls | None = None,
                            limits: ConnectionLimits | None = None) -> OxiaServer:
    """Serve ``engine`` over Oxia's protocol on ``host:port`` (0: any free port).

    ``advertised_address`` is the ``host:port`` given to clients as shard leader;
    by default the bind address (the host name when binding every interface).
    ``namespaces`` exist besides ``default`` (and those created in earlier runs);
    clients may create ``max_namespaces`` others, no more. With ``tls`` the port
    speaks TLS only (``tls.py``). With ``limits`` the port is served by ``guard.py``
    (connections per IP, slow frames), relaying to gRPC on a loopback port.
    """
    credentials = tls.server_credentials() if tls is not None else None  # unreadable files fail first
    _check_port_free(host, port)
    # SO_REUSEPORT would let a second server bind the same port silently.
    server = aio.server(options=cv.GRPC_OPTIONS + [("grpc.so_reuseport", 0)])
    grpc_address = _host_port(host, port) if limits is None else "127.0.0.1:0"
    bound = (server.add_insecure_port(grpc_address) if credentials is None
             else server.add_secure_port(grpc_address, credentials))
    if not bound:
        raise OSError(f"cannot bind the oxia listener to {grpc_address}")
    guard = None
    if limits is not None:  # the public port first (a taken one fails here), relaying once gRPC runs
        guard = OxiaGuard(limits, bound)
        bound = await guard.bind(host, port)
    if advertised_address is None:
        adv_host = socket.gethostname() if host in ("", "0.0.0.0", "::", "[::]") else host
        advertised_address = _host_port(adv_host, bound)
    servicer = OxiaServicer(engine, advertised_address, namespaces=namespaces, max_namespaces=max_namespaces)
    pbg.add_to_server(servicer, server)
    await server.start()
    if guard is not None:
        await guard.serve()
    log.info("oxia protocol listening on %s%s (advertised as %s)", _host_port(host, bound),
             " over TLS" if tls is not None else "", advertised_address)
    return OxiaServer(server, servicer, bound, advertised_address, guard)


def _check_port_free(host: str, port: int) -> None:
    """Raise OSError(EADDRINUSE) for a taken port (gRPC only says it failed, and logs a line of its own)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OSError(errno.EADDRINUSE, f"port {port} is already in use on {host}") from None
            # Anything else (an unknown host name ...) gRPC reports itself.


async def serve(data_dir: str, host: str, port: int, shards: int,
                advertised_address: str | None = None, *, namespaces: Iterable[str] = (),
                max_namespaces: int = DEFAULT_MAX_NAMESPACES, tls: OxiaTls | None = None,
                limits: ConnectionLimits | None = None) -> None:
    """Run ``nereus oxia`` until SIGINT/SIGTERM (``limits``: the port's connection limits, ``guard.py``)."""
    namespaces = list(namespaces)
    # Handlers first: a signal while the server starts must not interrupt gRPC half-way.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    engine = Engine(data_dir, shards=shards, namespaces={name: shards for name in namespaces})
    try:
        srv = await start_oxia_server(engine, host, port, advertised_address=advertised_address,
                                      namespaces=namespaces, max_namespaces=max_namespaces, tls=tls,
                                      limits=limits)
        await stop.wait()
        log.info("stopping the oxia server")
        await srv.stop()
    finally:
        await engine.close()
