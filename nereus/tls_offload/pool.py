"""The broker's TLS offload workers (``tlsOffloadProcesses``): started, watched, restarted, stopped.

The broker binds each offloaded TLS port itself (so a port in use and port 0 behave
as for any listener) and hands the listening socket to every worker, which accept
from it in turn: the kernel's accept queue spreads the clients over the workers.
Each listener gets a private unix socket in a directory only the broker's user can
enter; workers relay each client's plaintext there (``inbound``). A worker reads its
stdin to the end: when the broker exits, killed or not, the pipe closes and the
workers exit, releasing the port. A worker that dies while the broker runs is
started again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time

from ..tasks import wait_for
from ..tls import TlsOptions
from .inbound import OffloadedConnection

log = logging.getLogger(__name__)

_READY_TIMEOUT = 30.0
_RESTART_PAUSE = 1.0  # a worker that died this soon after its start is restarted after a pause
_STOP_TIMEOUT = 5.0


class TlsOffload:
    """``processes`` worker processes ending TLS, with ``tls``'s settings, for the listeners added."""

    def __init__(self, tls: TlsOptions, processes: int) -> None:
        if processes < 1:
            raise ValueError("tlsOffloadProcesses must be >= 1 to offload TLS")
        self.tls = tls
        self.processes = processes
        self.directory = tempfile.mkdtemp(prefix="nereus-tls-")  # mode 0700: only this user reaches the sockets
        self._public: list[tuple[socket.socket, str]] = []  # (listening socket, backend unix socket path)
        self._workers: list[asyncio.subprocess.Process | None] = [None] * processes
        self._watchers: list[asyncio.Task] = []
        self._closing = False
        self.restarts = 0

    async def listen(self, name: str, factory, host: str, port: int) -> tuple[asyncio.AbstractServer, int]:
        """Bind the public TLS ``host:port`` for the workers; the broker's server of ``factory`` connections
        (serving from its ``start_serving()``) and the bound port."""
        if self._watchers:
            raise RuntimeError("TLS offload listeners are added before start()")
        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        public = socket.create_server((host, port), family=family, backlog=1024)
        path = os.path.join(self.directory, f"{len(self._public)}.sock")
        try:
            server = await asyncio.get_running_loop().create_unix_server(
                lambda: OffloadedConnection(factory, name), path, start_serving=False)
        except BaseException:
            public.close()
            raise
        self._public.append((public, path))
        bound = public.getsockname()[1]
        log.info("%s: TLS on port %d ended by %d offload worker processes", name, bound, self.processes)
        return server, bound

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self._workers if proc is not None and proc.returncode is None]

    async def start(self) -> None:
        """Start the workers; returns once each accepts connections."""
        for slot in range(self.processes):
            self._workers[slot] = await self._spawn()
        self._watchers = [asyncio.ensure_future(self._watch(slot)) for slot in range(self.processes)]

    async def _spawn(self) -> asyncio.subprocess.Process:
        fds = [sock.fileno() for sock, _path in self._public]
        config = {"tls": dataclasses.asdict(self.tls), "log_level": logging.getLogger("nereus").getEffectiveLevel(),
                  "listeners": [{"fd": sock.fileno(), "backend": path} for sock, path in self._public]}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nereus.tls_offload.worker", stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, pass_fds=fds)
        proc.stdin.write(json.dumps(config).encode() + b"\n")  # stdin then stays open: the worker's lifeline
        try:
            line = await wait_for(proc.stdout.readline(), _READY_TIMEOUT)
        except asyncio.TimeoutError:
            line = b""
        if line.strip() != b"ready":
            proc.kill()
            code = await proc.wait()
            raise RuntimeError(f"a TLS offload worker did not start (exit code {code}; its log is above)")
        return proc

    async def _watch(self, slot: int) -> None:
        while not self._closing:
            proc = self._workers[slot]
            started = time.monotonic()
            code = await proc.wait()
            if self._closing:
                return
            self.restarts += 1
            log.warning("TLS offload worker %d exited with code %s: starting another", proc.pid, code)
            if time.monotonic() - started < _RESTART_PAUSE:
                await asyncio.sleep(_RESTART_PAUSE)
            try:
                self._workers[slot] = await self._spawn()
            except (OSError, RuntimeError) as exc:
                log.error("TLS offload: cannot restart a worker: %s", exc)
                await asyncio.sleep(_RESTART_PAUSE)
                # The slot keeps its dead process: the next turn waits on it (at once) and tries again.

    async def close(self) -> None:
        """Stop the workers (their stdin closes: they exit) and release the ports."""
        self._closing = True
        for task in self._watchers:
            task.cancel()
        for proc in self._workers:
            if proc is None or proc.returncode is not None:
                continue
            proc.stdin.close()
            try:
                await wait_for(proc.wait(), _STOP_TIMEOUT)
            except asyncio.TimeoutError:
                log.warning("TLS offload worker %d did not stop: killing it", proc.pid)
                proc.kill()
                await proc.wait()
        for sock, _path in self._public:
            sock.close()
        shutil.rmtree(self.directory, ignore_errors=True)


async def tls_server(name: str, factory, host: str, port: int, context,
                     offload: TlsOffload | None) -> tuple[asyncio.AbstractServer, int]:
    """A TLS listener of ``factory`` connections on ``host:port``, not serving until ``start_serving()``:
    TLS ended in this process with ``context``, or by ``offload``'s workers; the server and its port."""
    if offload is not None:
        return await offload.listen(name, factory, host, port)
    server = await asyncio.get_running_loop().create_server(factory, host, port, ssl=context, start_serving=False)
    return server, server.sockets[0].getsockname()[1] if port == 0 else port


__all__ = ["TlsOffload", "tls_server"]
