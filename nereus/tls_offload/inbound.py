"""The broker's end of offloaded TLS: connections from workers, each opened by a PROXY v2 header.

A worker's connection to the broker's private unix socket starts with the PROXY
header; once it is read, the connection is handed to the listener's own protocol
(a Kafka or Pulsar connection) as if it were the client's TLS connection: its
transport answers ``peername`` with the client's address and ``OFFLOADED`` with the
header (``nereus.tls.peer_cert_cn`` reads the certificate CN from it). A malformed
header closes the connection with a log line.
"""

from __future__ import annotations

import asyncio
import logging

from ..tls import OFFLOADED
from .proxy_header import HeaderReader, ProxyHeader, ProxyHeaderError

log = logging.getLogger(__name__)

# The transport methods a protocol calls, taken from the worker connection's transport as they are.
_DELEGATED = ("write", "writelines", "write_eof", "can_write_eof", "close", "abort", "is_closing",
              "pause_reading", "resume_reading", "is_reading", "set_write_buffer_limits",
              "get_write_buffer_size", "get_write_buffer_limits", "get_protocol", "set_protocol")


class OffloadedTransport(asyncio.Transport):
    """The transport of a worker's connection, seen as the client's: its address is the header's."""

    def __init__(self, transport: asyncio.Transport, header: ProxyHeader) -> None:
        super().__init__({"peername": header.source, "sockname": header.destination, OFFLOADED: header})
        self._transport = transport
        for name in _DELEGATED:  # bound once: no extra call on every write
            setattr(self, name, getattr(transport, name))

    def get_extra_info(self, name, default=None):
        if name in self._extra:
            return self._extra[name]
        return self._transport.get_extra_info(name, default)


class OffloadedConnection(asyncio.Protocol):
    """Reads a worker connection's PROXY header, then gives the connection to ``factory()``'s protocol."""

    def __init__(self, factory, listener: str) -> None:
        self._factory = factory
        self._listener = listener
        self._reader = HeaderReader()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            header = self._reader.receive(data)
        except ProxyHeaderError as exc:
            log.warning("%s: closing a TLS offload connection: bad PROXY header: %s", self._listener, exc)
            self._transport.abort()
            return
        if header is None:
            return
        protocol = self._factory()
        self._transport.set_protocol(protocol)  # from now on the transport calls the protocol itself
        wrapped = OffloadedTransport(self._transport, header)
        protocol.connection_made(wrapped)
        if self._reader.rest and not self._transport.is_closing():
            protocol.data_received(self._reader.rest)

    def eof_received(self) -> bool:
        return False  # closed before its header: nothing to hand over

    def connection_lost(self, exc) -> None:
        self._transport = None


__all__ = ["OffloadedConnection", "OffloadedTransport"]
