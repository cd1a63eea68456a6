"""``WalReplicaClient``: one writer's connection to one replica.

One connection, opened on the first request and again on the first request after it broke;
requests are pipelined on it and answers matched by request id. Failures raise the store's
own errors (``BlockFenced``, ``EntryNotFound``, ``WalFull``, ``WalCorrupt``, ``WalError``).
When the connection fails, or a request gets no answer within ``timeout`` (the replica is
taken for stalled and the connection dropped), every request pending on it fails with
``ReplicaUnavailable``. With ``token`` (a callable giving this broker's token), each new
connection first authenticates; a refusal fails the requests with ``WalUnauthorized``. When
the replica answers a request UNAUTHORIZED later (the token it was shown has expired), the
connection authenticates again with the callable's current token and the request is sent
once more.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
from collections.abc import Callable

from .errors import ProtocolError, ReplicaUnavailable, WalError, WalUnauthorized
from .protocol import Append, Auth, Blocks, Drop, Fence, FrameDecoder, Ping, Read, Response, Status, encode, raise_for

log = logging.getLogger(__name__)

_READ_BYTES = 256 << 10


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future] = {}
        self.broken: ReplicaUnavailable | None = None
        self.reading: asyncio.Task | None = None


class WalReplicaClient:
    """Requests to the replica at ``host:port``; see the module docstring for failures."""

    def __init__(self, host: str, port: int, *, ssl: ssl_module.SSLContext | None = None,
                 token: Callable[[], bytes] | None = None, timeout: float = 10.0) -> None:
        self.host = host
        self._token = token
        self.port = port
        self.timeout = timeout
        self._ssl = ssl
        self._connection: _Connection | None = None
        self._connecting: asyncio.Task | None = None
        self._next_request_id = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"WalReplicaClient({self.host}:{self.port})"

    async def append(self, block: str, key: str, data: bytes | memoryview | list[bytes | memoryview]) -> None:
        """Store entry ``key`` of ``block`` on the replica; on its disk when this returns."""
        await self._call(lambda request_id: Append(request_id, block, key, data))

    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of entry ``key``."""
        response = await self._call(lambda request_id: Read(request_id, key, start, end))
        return bytes(response.data)

    async def fence(self, block: str) -> list[str]:
        """Close ``block`` to appends on the replica; the keys it holds for it."""
        return list((await self._call(lambda request_id: Fence(request_id, block))).names)

    async def drop(self, block: str) -> None:
        """Make the replica forget ``block``."""
        await self._call(lambda request_id: Drop(request_id, block))

    async def blocks(self) -> list[str]:
        """The blocks the replica holds."""
        return list((await self._call(Blocks)).names)

    async def ping(self) -> None:
        await self._call(Ping)

    async def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._connection is not None:
            self._break(self._connection, "the client was closed")

    async def _call(self, make) -> Response:
        response = await self._send(make)
        if response.status == Status.UNAUTHORIZED and self._token is not None:
            connection = await self._connect()
            await self._authenticate(connection, self._token())  # a token file's newest token
            response = await self._send(make)
        return raise_for(response)

    async def _send(self, make) -> Response:
        if self._closed:
            raise ReplicaUnavailable(f"{self!r} is closed")
        self._next_request_id += 1
        request_id = self._next_request_id
        try:
            frame = encode(make(request_id))
        except ValueError as exc:
            raise WalError(str(exc)) from None
        connection = await self._connect()
        answer = asyncio.get_running_loop().create_future()
        connection.pending[request_id] = answer
        try:
            if connection.broken is not None:  # it broke while this request waited for it
                raise ReplicaUnavailable(*connection.broken.args)
            async with asyncio.timeout(self.timeout):
                connection.writer.writelines(frame)
                await connection.writer.drain()
                response = await answer
        except TimeoutError:
            self._break(connection, f"no answer within {self.timeout} s")
            raise ReplicaUnavailable(*connection.broken.args) from None
        except (ConnectionError, OSError) as exc:
            self._break(connection, f"the connection failed: {exc}")
            raise ReplicaUnavailable(*connection.broken.args) from None
        finally:
            connection.pending.pop(request_id, None)
        return response

    async def _connect(self) -> _Connection:
        if self._connection is not None and self._connection.broken is None:
            return self._connection
        if self._connecting is None:
            self._connecting = asyncio.ensure_future(self._open())
            self._connecting.add_done_callback(self._connected)
        connecting = self._connecting
        try:
            return await asyncio.shield(connecting)
        except asyncio.CancelledError:
            if connecting.cancelled() and not asyncio.current_task().cancelling():
                raise ReplicaUnavailable(f"{self!r} was closed while connecting") from None
            raise

    def _connected(self, task: asyncio.Task) -> None:
        self._connecting = None
        if not task.cancelled() and task.exception() is None:
            self._connection = task.result()
            if self._closed:
                self._break(self._connection, "the client was closed")

    async def _open(self) -> _Connection:
        try:
            async with asyncio.timeout(self.timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self._ssl)
        except (OSError, TimeoutError) as exc:
            raise ReplicaUnavailable(f"replica {self.host}:{self.port} is unreachable: {exc or 'timed out'}") from None
        connection = _Connection(reader, writer)
        connection.reading = asyncio.ensure_future(self._read_answers(connection))
        if self._token is not None:
            await self._authenticate(connection, self._token())
        return connection

    async def _authenticate(self, connection: _Connection, token: bytes) -> None:
        """AUTH before anything else on ``connection``; ``WalUnauthorized`` if the replica refuses."""
        self._next_request_id += 1
        request_id = self._next_request_id
        answer = asyncio.get_running_loop().create_future()
        connection.pending[request_id] = answer
        try:
            async with asyncio.timeout(self.timeout):
                connection.writer.writelines(encode(Auth(request_id, token)))
                await connection.writer.drain()
                raise_for(await answer)
        except WalUnauthorized as exc:
            self._break(connection, "it refused this broker's credentials")
            raise WalUnauthorized(f"replica {self.host}:{self.port} refused this broker's credentials: {exc}") \
                from None
        except (TimeoutError, ConnectionError, OSError, ReplicaUnavailable) as exc:
            self._break(connection, f"authenticating failed: {exc or 'no answer in time'}")
            raise ReplicaUnavailable(*connection.broken.args) from None
        finally:
            connection.pending.pop(request_id, None)

    async def _read_answers(self, connection: _Connection) -> None:
        decoder = FrameDecoder()
        try:
            while data := await connection.reader.read(_READ_BYTES):
                decoder.receive_data(data)
                for message in decoder:
                    if not isinstance(message, Response):
                        raise ProtocolError("the replica sent a request")
                    answer = connection.pending.pop(message.request_id, None)
                    if answer is not None and not answer.done():
                        answer.set_result(message)
            reason = "the replica closed the connection"
        except ProtocolError as exc:
            log.warning("%r: bad frame from the replica: %s", self, exc)
            reason = f"bad frame from the replica: {exc}"
        except (ConnectionError, OSError) as exc:
            reason = f"the connection failed: {exc}"
        except asyncio.CancelledError:
            reason = "the client was closed"
        self._break(connection, reason)

    def _break(self, connection: _Connection, reason: str) -> None:
        """Fail everything pending on ``connection`` and drop it; the next request reconnects."""
        if connection.broken is None:
            connection.broken = ReplicaUnavailable(f"replica {self.host}:{self.port}: {reason}")
            connection.writer.close()
            if connection.reading is not None and connection.reading is not asyncio.current_task():
                connection.reading.cancel()
        for answer in connection.pending.values():
            if not answer.done():
                answer.set_exception(ReplicaUnavailable(*connection.broken.args))
        connection.pending.clear()
        if self._connection is connection:
            self._connection = None
