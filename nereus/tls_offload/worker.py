"""A TLS offload worker process: ends TLS on the broker's public ports and relays the plaintext.

Started by the broker (``python -m nereus.tls_offload.worker``) with the listening
sockets of its TLS ports inherited and one JSON line on stdin: the TLS settings and,
per socket, the broker's private unix socket to relay to. It answers ``ready`` on
stdout once it accepts. For each client it completes the TLS handshake (the same
context the broker would build, so client certificates are verified the same way),
connects to the broker, sends a PROXY v2 header (client address, certificate CN) and
relays bytes both ways, reading from one side only while the other side's write
buffer has room. stdin stays open: its end of file (the broker exited, even killed)
stops the worker at once, so the port is free for a restarted broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import sys

from ..tls import TlsOptions, certificate_cn
from .proxy_header import encode

log = logging.getLogger("nereus.tls_offload.worker")

WRITE_BUFFER_HIGH = 1 << 20  # bytes queued for one side before the other side is not read


class ClientSide(asyncio.Protocol):
    """A client's TLS connection; its bytes go to the broker's unix socket ``backend``."""

    def __init__(self, backend: str, connecting: set) -> None:
        self._backend_path = backend
        self._connecting = connecting
        self.transport: asyncio.Transport | None = None
        self.backend: asyncio.Transport | None = None
        self.early: list[bytes] = []  # bytes delivered before the broker connection was there
        self.closed = False

    def connection_made(self, transport) -> None:  # after the handshake
        self.transport = transport
        transport.pause_reading()  # until the broker connection is there
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        task = asyncio.ensure_future(self._connect())
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect(self) -> None:
        peer = self.transport.get_extra_info("peername")
        local = self.transport.get_extra_info("sockname")
        ssl_object = self.transport.get_extra_info("ssl_object")
        header = encode(peer[:2], local[:2], tls_version=ssl_object.version() if ssl_object else None,
                        ssl_cn=certificate_cn(self.transport.get_extra_info("peercert")))
        try:
            backend, _ = await asyncio.get_running_loop().create_unix_connection(lambda: BackendSide(self),
                                                                                 self._backend_path)
        except OSError as exc:
            log.warning("tls offload: cannot reach the broker at %s: %s", self._backend_path, exc)
            self.transport.abort()
            return
        if self.closed:
            backend.abort()
            return
        backend.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)
        backend.writelines([header, *self.early])
        self.early = []
        self.backend = backend
        self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.backend is None:
            self.early.append(data)  # reading is paused until then; a transport may still hand over what it had
        else:
            self.backend.write(data)

    def eof_received(self) -> bool:
        if self.backend is not None and self.backend.can_write_eof():
            self.backend.write_eof()  # the broker sees the client's half-close
        return False  # a TLS transport cannot stay half-open: it closes

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.backend is not None:
            self.backend.close()  # after what is buffered for the broker

    def pause_writing(self) -> None:
        if self.backend is not None:
            self.backend.pause_reading()

    def resume_writing(self) -> None:
        if self.backend is not None and not self.backend.is_closing():
            self.backend.resume_reading()


class BackendSide(asyncio.Protocol):
    """The connection to the broker of one client; its bytes go back to the client."""

    def __init__(self, client: ClientSide) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)

    def eof_received(self) -> bool:
        self.client.transport.close()  # TLS has no half-close: close (after what is buffered)
        return False

    def connection_lost(self, exc) -> None:
        self.client.transport.close()

    def pause_writing(self) -> None:
        self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if not self.client.transport.is_closing():
            self.client.transport.resume_reading()


def _read_config() -> dict:
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 65536)
        if not chunk:
            raise SystemExit("tls offload worker: no configuration on stdin")
        line += chunk
    return json.loads(line)


async def serve(config: dict) -> None:
    """Serve the listeners of ``config`` until stdin reaches end of file."""
    loop = asyncio.get_running_loop()
    context = TlsOptions(**config["tls"]).server_context()
    connecting: set = set()
    servers = []
    for listener in config["listeners"]:
        sock = socket.socket(fileno=listener["fd"])
        servers.append(await loop.create_server(lambda backend=listener["backend"]: ClientSide(backend, connecting),
                                                sock=sock, ssl=context, backlog=1024))
    stopped = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stopped.done() or stopped.set_result("SIGTERM"))

    def lifeline() -> None:
        if not os.read(0, 4096):
            loop.remove_reader(0)
            if not stopped.done():
                stopped.set_result("the broker exited")

    loop.add_reader(0, lifeline)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    reason = await stopped
    log.info("tls offload worker %d stopping: %s", os.getpid(), reason)
    for server in servers:
        server.close()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the broker's to handle
    config = _read_config()
    logging.basicConfig(level=config.get("log_level", logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
    try:
        import uvloop
    except ImportError:
        uvloop = None
    if uvloop is not None:
        uvloop.run(serve(config))
    else:
        asyncio.run(serve(config))
    # Open client connections end with the process: the broker is gone or stopping.
    os._exit(0)


if __name__ == "__main__":
    main()
