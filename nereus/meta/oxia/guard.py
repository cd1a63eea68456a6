"""The Oxia port's connection limits: a TCP front that admits, times frames, then relays to gRPC.

gRPC's server has no per-address connection count nor a deadline for a started
frame, so the public port is served here and each admitted connection is relayed
byte for byte to the gRPC server on a loopback port. Frames are followed without
being decoded: HTTP/2's (after its 24-byte preface), or the TLS records of a TLS
port (the TLS session stays end to end between client and gRPC server). One whose
frame is not complete ``frame_read_timeout`` seconds after its first bytes is closed,
as on the Pulsar and Kafka ports. Either side's write buffer filling pauses the other
side's reading, so the relay holds no more than a socket buffer's worth.
"""

from __future__ import annotations

import asyncio
import logging

from ...net_limits import WRITE_BUFFER_HIGH, ConnectionLimits, FrameTimer

log = logging.getLogger(__name__)

_PREFACE = 24  # b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_TLS_HANDSHAKE = 0x16


class StreamFrames:
    """Where frames (HTTP/2 frames, or TLS records) start and end in a client's bytes."""

    def __init__(self) -> None:
        self._tls: bool | None = None
        self._preface = _PREFACE
        self._header = bytearray()
        self._left = 0  # payload bytes of the current frame still to come

    @property
    def partial(self) -> bool:
        return bool(self._header) or self._left > 0 or (not self._tls and 0 < self._preface < _PREFACE)

    def feed(self, data: bytes) -> bool:
        """Account for ``data``; True if it completed at least one frame."""
        if self._tls is None and data:
            self._tls = data[0] == _TLS_HANDSHAKE
        completed = False
        i, n = 0, len(data)
        size = 5 if self._tls else 9
        while i < n:
            if not self._tls and self._preface:
                take = min(self._preface, n - i)
                self._preface -= take
                i += take
                completed = completed or not self._preface
            elif self._left:
                take = min(self._left, n - i)
                self._left -= take
                i += take
                completed = completed or not self._left
            else:
                take = min(size - len(self._header), n - i)
                self._header += data[i:i + take]
                i += take
                if len(self._header) == size:
                    header = self._header
                    self._left = int.from_bytes(header[3:5] if self._tls else header[0:3], "big")
                    self._header = bytearray()
                    completed = completed or not self._left
        return completed


class _Back(asyncio.Protocol):
    """The relay's connection to the gRPC server."""

    def __init__(self, front: _Front) -> None:
        self.front = front
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)

    def data_received(self, data: bytes) -> None:
        self.front.write(data)

    def pause_writing(self) -> None:
        self.front.pause_reading()

    def resume_writing(self) -> None:
        self.front.resume_reading()

    def connection_lost(self, exc) -> None:
        self.front.close()


class _Front(asyncio.Protocol):
    """One client connection on the public Oxia port."""

    def __init__(self, guard: OxiaGuard) -> None:
        self.guard = guard
        self.transport = None
        self._ip: str | None = None
        self._back: _Back | None = None
        self._early: list[bytes] = []  # received before the relay's connection is open
        self._frames = StreamFrames()
        self._timer = FrameTimer(guard.limits, self._too_slow)
        self._closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        ip = self.guard.limits.admit_peer(transport)
        if ip is None:
            self._closed = True
            return
        self._ip = ip
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        transport.pause_reading()  # until the relay is open
        self.guard.connections.add(self)
        task = asyncio.ensure_future(self._open())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _open(self) -> None:
        try:
            _, back = await asyncio.get_running_loop().create_connection(lambda: _Back(self), "127.0.0.1",
                                                                         self.guard.backend_port)
        except OSError as exc:
            log.warning("oxia: cannot relay a connection to the gRPC server: %s", exc)
            self.close()
            return
        if self._closed:
            back.transport.close()
            return
        self._back = back
        if self._early:
            back.transport.write(b"".join(self._early))
            self._early.clear()
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        completed = self._frames.feed(data)
        self._timer.update(self._frames.partial, completed)
        if self._back is None:  # (a loop may hand over bytes read before pause_reading took)
            self._early.append(data)
            self.transport.pause_reading()
            return
        self._back.transport.write(data)

    def eof_received(self):
        if self._back is not None and self._back.transport.can_write_eof():
            self._back.transport.write_eof()
        return True

    def write(self, data: bytes) -> None:
        if not self._closed:
            self.transport.write(data)

    def pause_writing(self) -> None:
        if self._back is not None:
            self._back.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._back is not None:
            self._back.transport.resume_reading()

    def pause_reading(self) -> None:
        if not self._closed:
            self._timer.cancel()  # a frame we stopped reading is not the client's delay
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if not self._closed:
            self.transport.resume_reading()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.transport.close()

    def connection_lost(self, exc) -> None:
        self._closed = True
        self._timer.cancel()
        if self._ip is None:
            return
        self.guard.limits.release(self._ip)
        self._ip = None
        self.guard.connections.discard(self)
        if self._back is not None:
            self._back.transport.close()

    def _too_slow(self, detail: str) -> None:
        log.warning("oxia: closing connection: %s", detail)
        self._closed = True
        self.transport.abort()


class OxiaGuard:
    """The public Oxia listener in front of the gRPC server on ``backend_port`` (loopback)."""

    def __init__(self, limits: ConnectionLimits, backend_port: int) -> None:
        self.limits = limits
        self.backend_port = backend_port
        self.connections: set[_Front] = set()
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def bind(self, host: str, port: int) -> int:
        """Bind the public port (clients wait in the backlog until ``serve``); the bound port."""
        self._server = await asyncio.get_running_loop().create_server(lambda: _Front(self), host or None, port,
                                                                      start_serving=False)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def serve(self) -> None:
        await self._server.start_serving()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for front in list(self.connections):
            front.close()


__all__ = ["OxiaGuard", "StreamFrames"]
