"""``WalServer``: a replica's store served over TCP (optionally TLS) with the replica protocol.

Requests on a connection are pipelined: each is answered as soon as it completes, so
answers leave in any order (the client matches them by request id). A connection reads no
further while the appends it has in flight pass ``max_inflight_bytes`` (or their count passes
``max_inflight_requests``): a fast writer cannot make the replica hold unbounded data. A
connection that sends bytes that are no frame is closed and logged; the others go on.

With ``authenticate`` (a cluster with authentication and no mutual TLS), a connection is
served only after an AUTH request whose token ``authenticate`` accepts; it is handled
before any later request on the connection is read, so requests pipelined behind it are
served. Until then every request but PING is answered UNAUTHORIZED and not executed. A
token that expires takes the connection's proof with it: from then on requests are
answered UNAUTHORIZED (and not executed) until a new AUTH (the client sends its current
token and retries them).
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
import time
from collections.abc import Callable

from . import metrics
from .errors import ProtocolError, WalError
from .protocol import (Append, Auth, Blocks, Drop, Fence, FrameDecoder, Ping, Read, Request, Response, Status, encode,
                       failure)
from .store import WalStore

log = logging.getLogger(__name__)

_READ_BYTES = 256 << 10


class _Connection:
    def __init__(self, writer: asyncio.StreamWriter, limits: tuple[int, int], authenticated: bool) -> None:
        self.writer = writer
        self.authenticated = authenticated
        self.expires_at: float | None = None  # when the proof of the last AUTH expires (None: never)
        self.peer = writer.get_extra_info("peername")
        self.max_bytes, self.max_requests = limits
        self.inflight_bytes = 0
        self.requests: set[asyncio.Task] = set()
        self.room = asyncio.Event()
        self.closing = False

    def full(self) -> bool:
        return self.inflight_bytes > self.max_bytes or len(self.requests) >= self.max_requests


class WalServer:
    """Serves ``store`` on ``host:port`` (port 0: any free port, then read ``port``)."""

    def __init__(self, store: WalStore, host: str, port: int, *, ssl: ssl_module.SSLContext | None = None,
                 authenticate: Callable[[bytes], tuple[str, float | None]] | None = None,
                 max_inflight_bytes: int = 64 << 20, max_inflight_requests: int = 4096,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.host = host
        self.port = port
        self._ssl = ssl
        # token -> (who it proves, when that expires: epoch seconds or None); raises with the reason it proves nothing
        self._authenticate = authenticate
        self._clock = clock
        self._limits = (max_inflight_bytes, max_inflight_requests)
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task, _Connection] = {}

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]
        metrics.watch(self.store)
        log.info("WAL replica of %s listening on %s:%d", self.store.directory, self.host, self.port)

    async def close(self) -> None:
        """Stop listening and drop every connection (the store stays open: its owner closes it)."""
        if self._server is not None:
            self._server.close()
        for connection in self._connections.values():
            connection.closing = True
            connection.writer.close()  # its read loop hears the end of the stream
            connection.room.set()
        if self._connections:
            await asyncio.wait(list(self._connections))
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = _Connection(writer, self._limits, authenticated=self._authenticate is None)
        task = asyncio.current_task()
        self._connections[task] = connection
        decoder = FrameDecoder()
        try:
            while data := await reader.read(_READ_BYTES):
                decoder.receive_data(data)
                for request in decoder:
                    if isinstance(request, Response):
                        raise ProtocolError("a response was sent to the replica")
                    if isinstance(request, Auth):
                        self._check_credentials(connection, request)
                    elif isinstance(request, Ping) or self._still_authenticated(connection):
                        self._dispatch(connection, request)
                    else:
                        reason = ("the token this connection proved has expired: AUTH again"
                                  if connection.expires_at is not None
                                  else "this WAL replica needs a broker's token first (AUTH)")
                        writer.writelines(encode(Response(request.request_id, Status.UNAUTHORIZED, reason)))
                while connection.full() and not connection.closing:
                    connection.room.clear()
                    await connection.room.wait()
        except ProtocolError as exc:
            log.warning("WAL replica: closing the connection from %s, which sent a bad frame: %s",
                        connection.peer, exc)
        except (ConnectionError, ssl_module.SSLError, OSError) as exc:
            log.debug("WAL replica: connection from %s failed: %s", connection.peer, exc)
        finally:
            del self._connections[task]
            writer.close()
            for request in list(connection.requests):
                request.cancel()  # the store finishes what it was given; nobody hears the answer

    def _check_credentials(self, connection: _Connection, request: Auth) -> None:
        if self._authenticate is None:
            connection.writer.writelines(encode(Response(request.request_id)))
            return
        try:
            who, expires_at = self._authenticate(bytes(request.token))
        except Exception as exc:  # noqa: BLE001 - every refusal is an answer, with its reason
            log.warning("WAL replica: refused the credentials of %s: %s", connection.peer, exc)
            connection.writer.writelines(encode(Response(request.request_id, Status.UNAUTHORIZED, str(exc))))
            return
        connection.authenticated = True
        connection.expires_at = expires_at
        log.debug("WAL replica: %s authenticated as %s", connection.peer, who)
        connection.writer.writelines(encode(Response(request.request_id)))

    def _still_authenticated(self, connection: _Connection) -> bool:
        if connection.authenticated and connection.expires_at is not None and self._clock() >= connection.expires_at:
            log.info("WAL replica: the token of %s expired; it must authenticate again", connection.peer)
            connection.authenticated = False
        return connection.authenticated

    def _dispatch(self, connection: _Connection, request: Request) -> None:
        size = len(request.data) if isinstance(request, Append) else 0
        connection.inflight_bytes += size
        answering = asyncio.ensure_future(self._answer(connection, request))
        connection.requests.add(answering)

        def done(task: asyncio.Task) -> None:
            connection.requests.discard(task)
            connection.inflight_bytes -= size
            connection.room.set()
            if not task.cancelled() and task.exception() is not None:
                log.error("WAL replica: answering %s failed", type(request).__name__, exc_info=task.exception())

        answering.add_done_callback(done)

    async def _answer(self, connection: _Connection, request: Request) -> None:
        try:
            response = await self._execute(request)
        except Exception as exc:  # every failure is an answer; only a store error is expected here
            if not isinstance(exc, (WalError, OSError)):
                log.error("WAL replica: %s failed", type(request).__name__, exc_info=exc)
            response = failure(request.request_id, exc)
        writer = connection.writer
        if writer.is_closing():
            return
        writer.writelines(encode(response))
        try:
            await writer.drain()
        except ConnectionError:
            pass  # the read loop hears of it too and ends the connection

    async def _execute(self, request: Request) -> Response:
        store, request_id = self.store, request.request_id
        if isinstance(request, Append):
            await store.append(request.block, request.key, request.data)
        elif isinstance(request, Read):
            return Response(request_id, data=await store.read(request.key, request.start, request.end))
        elif isinstance(request, Fence):
            return Response(request_id, names=tuple(await store.fence(request.block)))
        elif isinstance(request, Drop):
            await store.drop(request.block)
        elif isinstance(request, Blocks):
            return Response(request_id, names=tuple(store.blocks()))
        elif not isinstance(request, Ping):
            raise TypeError(f"not a request: {request!r}")
        return Response(request_id)
