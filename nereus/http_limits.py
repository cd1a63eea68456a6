"""The connection limits of the HTTP(S) listeners: connections per IP and slow request headers.

``GuardedSite`` serves an aiohttp runner as ``web.TCPSite`` does, with each connection's
protocol wrapped by ``GuardedHttp``: one connection too many from an address is closed
as it is accepted (``maxConnectionsPerIp``), and one whose request header (request line
and header fields, up to the blank line) is not complete ``frame_read_timeout``
seconds after its first bytes is closed (a slow-loris client). Bodies are skipped by
their ``Content-Length`` to find where the next request's header starts; a chunked or
upgraded connection is left alone after its header, as aiohttp bounds bodies itself.
"""

from __future__ import annotations

import asyncio
import logging
import re

from aiohttp import web

from .net_limits import ConnectionLimits, FrameTimer

log = logging.getLogger(__name__)

_HEADER_END = b"\r\n\r\n"
_MAX_HEADER = 64 << 10  # aiohttp refuses more than this anyway: no need to keep more to find the end
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_UNTRACKED = re.compile(rb"\r\n(transfer-encoding:[^\r]*chunked|upgrade:)", re.IGNORECASE)


class RequestHeaders:
    """Where request headers start and end in a connection's bytes."""

    def __init__(self) -> None:
        self._head = bytearray()  # the part of a header received so far
        self._body_left = 0
        self._untracked = False

    @property
    def partial(self) -> bool:
        """Part of a request header is received and not its end."""
        return bool(self._head) and not self._untracked

    def feed(self, data: bytes) -> bool:
        """Account for ``data``; True if it completed at least one request header."""
        completed = False
        view = memoryview(data)
        while view and not self._untracked:
            if self._body_left:
                take = min(self._body_left, len(view))
                self._body_left -= take
                view = view[take:]
                continue
            start = max(0, len(self._head) - 3)
            self._head += view
            end = self._head.find(_HEADER_END, start)
            if end < 0:
                if len(self._head) > _MAX_HEADER:
                    del self._head[:-3]  # keep what may begin the end marker; the timer still runs
                return completed
            header, rest = bytes(self._head[:end]), bytes(self._head[end + 4:])
            self._head.clear()
            completed = True
            if _UNTRACKED.search(header):
                self._untracked = True
                return completed
            length = _LENGTH.search(header)
            self._body_left = int(length.group(1)) if length else 0
            view = memoryview(rest)
        return completed


class GuardedHttp(asyncio.Protocol):
    """Wraps aiohttp's protocol of one connection with the limits of ``ConnectionLimits``."""

    def __init__(self, inner: asyncio.Protocol, limits: ConnectionLimits) -> None:
        self._inner = inner
        self._limits = limits
        self._ip: str | None = None
        self._transport = None
        self._headers = RequestHeaders()
        self._timer = FrameTimer(limits, self._too_slow)

    def connection_made(self, transport) -> None:
        ip = self._limits.admit_peer(transport)
        if ip is None:
            return
        self._ip, self._transport = ip, transport
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._ip is None:
            return
        completed = self._headers.feed(data)
        self._timer.update(self._headers.partial, completed)
        self._inner.data_received(data)

    def eof_received(self):
        return self._inner.eof_received() if self._ip is not None else None

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc) -> None:
        self._timer.cancel()
        if self._ip is None:
            return  # refused at accept: aiohttp never saw it
        self._limits.release(self._ip)
        self._ip = None
        self._inner.connection_lost(exc)

    def _too_slow(self, detail: str) -> None:
        log.warning("http: closing connection: request header %s", detail)
        if self._transport is not None:
            self._transport.abort()


class GuardedSite(web.TCPSite):
    """``web.TCPSite`` whose connections are held to ``limits``."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, *, limits: ConnectionLimits,
                 ssl_context=None) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._limits = limits

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        self._server = await asyncio.get_running_loop().create_server(
            lambda: GuardedHttp(server(), self._limits), self._host, self._port, ssl=self._ssl_context,
            backlog=self._backlog)
        self._bound_port = self._server.sockets[0].getsockname()[1] if self._server.sockets else self._port


__all__ = ["GuardedHttp", "GuardedSite", "RequestHeaders"]
