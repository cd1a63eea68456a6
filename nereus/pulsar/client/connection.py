"""One Pulsar protocol connection from this broker to another cluster's broker.

A small client of the binary protocol, for the replicators: CONNECT (token
authentication, TLS), request/response by ``request_id`` (lookups, partitioned
metadata, producers), SEND receipts by producer, and the broker's own commands
(PING, CLOSE_PRODUCER, AUTH_CHALLENGE). The frames are the sans-io codec's; this
module only moves them over an asyncio stream.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

from ...codec.pulsar import Frame, FrameDecoder, PulsarCodecError, encode_command, pb, wrap
from ...tasks import wait_for
from ...codec.pulsar.commands import type_name

log = logging.getLogger(__name__)

CLIENT_VERSION = "nereus-replicator"
PROTOCOL_VERSION = 19
#: Bytes buffered for the socket above which senders wait for it to drain.
HIGH_WATER = 4 << 20

_T = pb.BaseCommand.Type
_RESPONSES = {_T.Value(name) for name in ("SUCCESS", "ERROR", "LOOKUP_RESPONSE", "PARTITIONED_METADATA_RESPONSE",
                                           "PRODUCER_SUCCESS", "GET_OR_CREATE_SCHEMA_RESPONSE")}
_PING, _PONG = _T.Value("PING"), _T.Value("PONG")
_RECEIPT, _SEND_ERROR = _T.Value("SEND_RECEIPT"), _T.Value("SEND_ERROR")
_CLOSE_PRODUCER, _AUTH_CHALLENGE = _T.Value("CLOSE_PRODUCER"), _T.Value("AUTH_CHALLENGE")


class ClientError(Exception):
    """The remote broker answered with an error, or the connection failed."""

    def __init__(self, message: str, error: int | None = None) -> None:
        super().__init__(message)
        self.error = error  # pb.ServerError value, when the broker named one


class ConnectionClosed(ClientError):
    """The connection ended; what was in flight has no answer."""


def parse_service_url(url: str) -> tuple[list[tuple[str, int]], bool]:
    """(hosts, tls) of ``pulsar://h1:6650,h2:6650`` or ``pulsar+ssl://...``."""
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", "pulsar+ssl"):
        raise ClientError(f"not a Pulsar service URL: {url!r}")
    tls = parts.scheme == "pulsar+ssl"
    hosts = []
    for item in parts.netloc.split(","):
        host, _, port = item.rpartition(":")
        if not host:
            host, port = item, ""
        hosts.append((host.strip("[]"), int(port) if port else (6651 if tls else 6650)))
    return hosts, tls


class ClientConnection:
    """An open, authenticated connection; ``request`` and ``send`` are safe to interleave."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, token: str | None) -> None:
        self._reader, self._writer = reader, writer
        self._token = token
        self._decoder = FrameDecoder()
        self._request_ids = itertools.count(1)
        self._requests: dict[int, asyncio.Future] = {}
        #: producer id -> handler(frame) of its receipts, send errors and close
        self.producers: dict[int, Callable[[Frame], None]] = {}
        self._producer_ids = itertools.count(1)
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()
        self._reading: asyncio.Task | None = None
        self.max_message_size = 5 << 20

    @classmethod
    async def open(cls, url: str, *, token: str | None = None, ssl_context: ssl.SSLContext | None = None,
                   timeout: float = 10.0, proxy_to_broker_url: str | None = None) -> "ClientConnection":
        """Connect to one of the URL's hosts and complete the CONNECT handshake."""
        hosts, tls = parse_service_url(url)
        if tls and ssl_context is None:
            ssl_context = ssl.create_default_context()
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
        last: Exception | None = None
        for host, port in hosts:
            try:
                reader, writer = await wait_for(
                    asyncio.open_connection(host, port, ssl=ssl_context if tls else None), timeout)
            except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
                last = exc
                continue
            conn = cls(reader, writer, token)
            try:
                await wait_for(conn._handshake(proxy_to_broker_url), timeout)
            except BaseException:
                conn.close()
                raise
            return conn
        raise ConnectionClosed(f"cannot connect to {url}: {last}")

    async def _handshake(self, proxy_to_broker_url: str | None) -> None:
        connect = pb.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        if self._token is not None:
            connect.auth_method_name = "token"
            connect.auth_data = self._token.encode()
        if proxy_to_broker_url:
            connect.proxy_to_broker_url = proxy_to_broker_url
        self._writer.write(encode_command(wrap(connect)))
        while True:
            frame = await self._read_frame()
            if frame is None:
                raise ConnectionClosed("the broker closed the connection during CONNECT")
            if frame.type == _T.Value("CONNECTED"):
                body = frame.body
                if body.HasField("max_message_size"):
                    self.max_message_size = body.max_message_size
                break
            if frame.type == _T.Value("ERROR"):
                raise ClientError(f"CONNECT refused: {frame.body.message}", frame.body.error)
            if frame.type == _AUTH_CHALLENGE:
                self._answer_challenge()
        self._reading = asyncio.ensure_future(self._read_loop())

    async def _read_frame(self) -> Frame | None:
        while True:
            frame = self._decoder.next_frame()
            if frame is not None:
                return frame
            data = await self._reader.read(1 << 16)
            if not data:
                return None
            self._decoder.receive_data(data)

    def _answer_challenge(self) -> None:
        data = pb.AuthData(auth_method_name="token", auth_data=(self._token or "").encode())
        self._writer.write(encode_command(wrap(pb.CommandAuthResponse(
            client_version=CLIENT_VERSION, response=data, protocol_version=PROTOCOL_VERSION))))

    async def _read_loop(self) -> None:
        reason: Exception = ConnectionClosed("the broker closed the connection")
        try:
            while (frame := await self._read_frame()) is not None:
                self._dispatch(frame)
        except (OSError, PulsarCodecError) as exc:
            reason = ConnectionClosed(f"connection lost: {exc}")
        except asyncio.CancelledError:
            reason = ConnectionClosed("connection closed")
        finally:
            self._fail_all(reason)

    def _dispatch(self, frame: Frame) -> None:
        kind = frame.type
        if kind in (_RECEIPT, _SEND_ERROR, _CLOSE_PRODUCER):
            handler = self.producers.get(frame.body.producer_id)
            if handler is not None:
                handler(frame)
        elif kind in _RESPONSES:
            waiter = self._requests.get(frame.body.request_id)
            if waiter is None:
                return
            if kind == _T.Value("PRODUCER_SUCCESS") and not frame.body.producer_ready:
                return  # queued behind an exclusive producer: the ready answer follows
            self._requests.pop(frame.body.request_id, None)
            if not waiter.done():
                waiter.set_result(frame)
        elif kind == _PING:
            self._writer.write(encode_command(wrap(pb.CommandPong())))
        elif kind == _AUTH_CHALLENGE:
            self._answer_challenge()
        elif kind != _PONG:
            log.debug("replicator connection: %s ignored", type_name(kind))

    def _fail_all(self, reason: Exception) -> None:
        for waiter in self._requests.values():
            if not waiter.done():
                waiter.set_exception(reason)
        self._requests.clear()
        if not self.closed.done():
            self.closed.set_result(reason)
        for handler in list(self.producers.values()):
            handler(None)
        self._writer.close()

    def next_producer_id(self) -> int:
        return next(self._producer_ids)

    async def request(self, build: Callable[[int], object], timeout: float = 30.0) -> Frame:
        """Send the sub-command ``build(request_id)`` and wait for its answer (ERROR raises)."""
        if self.closed.done():
            raise ConnectionClosed(str(self.closed.result()))
        request_id = next(self._request_ids)
        waiter = asyncio.get_running_loop().create_future()
        self._requests[request_id] = waiter
        self._writer.write(encode_command(wrap(build(request_id))))
        try:
            frame = await wait_for(waiter, timeout)
        finally:
            self._requests.pop(request_id, None)
        if frame.type == _T.Value("ERROR"):
            raise ClientError(frame.body.message or pb.ServerError.Name(frame.body.error), frame.body.error)
        return frame

    def write(self, buffers: list) -> None:
        self._writer.writelines(buffers)

    async def drain(self) -> None:
        """Wait while the socket's buffer is above ``HIGH_WATER``."""
        transport = self._writer.transport
        if transport.get_write_buffer_size() > HIGH_WATER:
            await self._writer.drain()

    def close(self) -> None:
        if self._reading is not None:
            self._reading.cancel()
        else:
            self._writer.close()
        if not self.closed.done():
            self.closed.set_result(ConnectionClosed("connection closed"))


__all__ = ["ClientConnection", "ClientError", "ConnectionClosed", "parse_service_url"]
