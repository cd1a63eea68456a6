"""Limits a listener puts on its client connections: connections per IP and slow frames.

``maxConnectionsPerIp`` (Pulsar's key; 0 = unlimited) counts the open connections of
each client address per protocol service (Pulsar or Kafka, all of its listeners);
the one over the limit is closed as it is accepted. ``frame_read_timeout`` closes a
connection whose frame, once its first bytes arrived, is not complete that many
seconds later: a slow-loris client trickling a frame (or stopping half-way) cannot
hold a connection and its buffer forever, while idle connections between frames are
left to the protocols' own keep-alives.

``max_pending_bytes`` bounds what one connection may have in flight (requests
received and not yet answered): its socket is not read while it has more, so a
client sending faster than storage keeps up waits in its own buffers (TCP
back-pressure), not in the broker's memory. Pulsar's count of pending SENDs
(``maxPendingPublishRequestsPerConnection``, default 1000) applies the same way.
``PendingBudget`` (``maxPendingBytesPerBroker``) bounds the sum over every Pulsar and
Kafka connection of the broker: past it, a connection that receives more is not read
until the total is back below half, so many connections each within their own limit
cannot together exhaust memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

log = logging.getLogger(__name__)

DEFAULT_FRAME_READ_TIMEOUT = 30.0
DEFAULT_MAX_PENDING_BYTES = 16 << 20
DEFAULT_MAX_PENDING_PUBLISH_REQUESTS = 1000
DEFAULT_MAX_PENDING_BYTES_PER_BROKER = 256 << 20
# Bytes written to a client and not yet taken by its socket, past which that client's
# requests are not read until it catches up (as a Kafka broker mutes such a channel).
WRITE_BUFFER_HIGH = 1 << 20
_REFUSAL_LOG_INTERVAL = 60.0


class PendingBudget:
    """Bytes pending over all the connections of a broker, and the connections waiting for room."""

    def __init__(self, limit: int = DEFAULT_MAX_PENDING_BYTES_PER_BROKER) -> None:
        if limit < 1:
            raise ValueError("maxPendingBytesPerBroker must be >= 1")
        self.limit = limit
        self.total = 0
        self.pauses = 0  # connections stopped because of this budget (a counter, for tests and logs)
        self._waiting: dict[object, object] = {}  # connection -> its resume callback

    @property
    def over(self) -> bool:
        return self.total >= self.limit

    def add(self, size: int) -> None:
        self.total += size

    def remove(self, size: int) -> None:
        self.total -= size
        if self._waiting and self.total < self.limit // 2:
            waiting, self._waiting = self._waiting, {}
            for resume in waiting.values():
                resume()

    def wait(self, connection, resume) -> None:
        """Call ``resume()`` once the total is back below half the limit."""
        if connection not in self._waiting:
            self.pauses += 1
            if self.pauses == 1 or self.pauses % 1000 == 0:
                log.warning("%d bytes pending over all connections (maxPendingBytesPerBroker %d): "
                            "connections are not read until half of it is answered", self.total, self.limit)
        self._waiting[connection] = resume

    def forget(self, connection) -> None:
        self._waiting.pop(connection, None)


class ConnectionLimits:
    """The per-IP connection count and the frame timeout of one protocol's listeners."""

    def __init__(self, max_connections_per_ip: int = 0,
                 frame_read_timeout: float = DEFAULT_FRAME_READ_TIMEOUT, *, protocol: str = "",
                 max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                 max_pending_publish_requests: int = DEFAULT_MAX_PENDING_PUBLISH_REQUESTS,
                 budget: PendingBudget | None = None) -> None:
        if max_connections_per_ip < 0:
            raise ValueError("maxConnectionsPerIp must be >= 0")
        if frame_read_timeout <= 0:
            raise ValueError("the frame read timeout must be > 0")
        if max_pending_bytes < 1 or max_pending_publish_requests < 1:
            raise ValueError("the pending bytes and publish requests limits must be >= 1")
        self.max_pending_bytes = max_pending_bytes
        self.budget = budget or PendingBudget()  # shared by every protocol of the broker
        self.max_pending_publish_requests = max_pending_publish_requests
        self.max_connections_per_ip = max_connections_per_ip
        self.frame_read_timeout = frame_read_timeout
        self.protocol = protocol
        self._open: Counter[str] = Counter()
        self._last_refusal_log: dict[str, float] = {}

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False (nothing counted) when it is one too many."""
        if self.max_connections_per_ip and self._open[ip] >= self.max_connections_per_ip:
            now = time.monotonic()
            if now - self._last_refusal_log.get(ip, -_REFUSAL_LOG_INTERVAL) >= _REFUSAL_LOG_INTERVAL:
                self._last_refusal_log[ip] = now  # once a minute per address: a flood must not flood the log
                log.warning("%s: refusing connections from %s: it has %d open (maxConnectionsPerIp)",
                            self.protocol, ip, self._open[ip])
            return False
        self._open[ip] += 1
        return True

    def admit_peer(self, transport) -> str | None:
        """``admit`` for a new connection: its peer's ip, or None once the transport is aborted
        (one too many from that address)."""
        ip = peer_ip(transport)
        if not self.admit(ip):
            transport.abort()
            return None
        return ip

    def release(self, ip: str) -> None:
        self._open[ip] -= 1
        if self._open[ip] <= 0:
            del self._open[ip]


class FrameTimer:
    """Closes a connection whose partly received frame is not complete in time."""

    def __init__(self, limits: ConnectionLimits, on_timeout) -> None:
        self._limits = limits
        self._on_timeout = on_timeout
        self._handle: asyncio.TimerHandle | None = None

    def update(self, partial: bool, completed: bool) -> None:
        """After each read: ``partial`` when bytes of an incomplete frame are buffered,
        ``completed`` when that read finished at least one frame (a new one has started)."""
        if completed or not partial:
            self.cancel()
        if not partial:
            return
        if self._handle is None:
            # The deadline runs from the frame's first bytes, not from the latest ones.
            self._handle = asyncio.get_running_loop().call_later(self._limits.frame_read_timeout, self._expired)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _expired(self) -> None:
        self._handle = None
        self._on_timeout(f"frame not complete {self._limits.frame_read_timeout:g} s after its first bytes")


def peer_ip(transport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if peer else "?"


def peer_address(transport) -> str:
    """``host:port`` of the peer, for logs ("?" when the transport does not say)."""
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"


__all__ = ["ConnectionLimits", "DEFAULT_FRAME_READ_TIMEOUT", "DEFAULT_MAX_PENDING_BYTES",
           "DEFAULT_MAX_PENDING_BYTES_PER_BROKER", "DEFAULT_MAX_PENDING_PUBLISH_REQUESTS", "FrameTimer",
           "PendingBudget", "WRITE_BUFFER_HIGH", "peer_address", "peer_ip"]
