"""`nereus standalone`: the metadata engine, its Oxia listener and a broker in one process.

With ``brokers > 1`` it also runs ``brokers - 1`` ``nereus broker`` child processes
over its own metadata engine (through the Oxia listener) and object store, on the
next ports up, so one machine's cores all serve: a Python process uses one core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from ..meta import open_engine
from ..meta.oxia import start_oxia_server
from ..objstore import open_object_store
from .cluster.origin import mark_standalone
from .node import BrokerOptions, advertised, bind_listener, freeze_startup_objects, start_broker
from .options import child_args
from ..tasks import wait_for

log = logging.getLogger(__name__)

CHILD_RESTART_SECONDS = 2.0


@dataclass(frozen=True)
class StandaloneConfig:
    data_dir: Path
    broker: BrokerOptions = BrokerOptions()
    oxia_port: int = 6648
    object_store: str | None = None  # default: file://{data_dir}/objects
    metadata_shards: int = 1
    session_timeout: float = 10.0
    brokers: int = 1
    # The option values (flags and --config) the standalone was given, which its child brokers are given too.
    given: Mapping[str, object] = field(default_factory=dict)


def install_stop_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)


async def until_stopped(start, stop: asyncio.Event):
    """``await start`` unless ``stop`` is set first (then cancel it, return None): a signal during
    start-up (say, while the metadata service is still unreachable) stops at once."""
    starting = asyncio.ensure_future(start)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not starting.done():
        starting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await starting
        log.info("stopped while starting")
        return None
    return starting.result()


async def run_standalone(config: StandaloneConfig, *, ready: asyncio.Event | None = None) -> None:
    """Run until SIGINT/SIGTERM, then shut down cleanly."""
    freeze_startup_objects()
    config.data_dir.mkdir(parents=True, exist_ok=True)
    objects_url = config.object_store or (config.data_dir / "objects").resolve().as_uri()
    stop = asyncio.Event()
    install_stop_signals(stop)
    options = config.broker if config.broker.log_dir else replace(config.broker, log_dir=config.data_dir / "logs")
    if options.sbt_catalog_uri is None:
        options = replace(options, sbt_catalog_uri=standalone_sbt_catalog(config.data_dir, objects_url))
    if options.wal_dir is None:
        options = replace(options, wal_dir=config.data_dir / "wal")
    objects = open_object_store(objects_url)  # first: a bad URL fails before anything opens
    async with contextlib.AsyncExitStack() as stack:
        # Unwound in reverse order, also when a listener fails to start (port in use).
        stack.push_async_callback(objects.close)
        engine = open_engine(str(config.data_dir / "meta"), shards=config.metadata_shards)
        stack.push_async_callback(engine.close)
        oxia = await bind_listener("oxia", options.bind, config.oxia_port,
                                   start_oxia_server(engine, options.bind, config.oxia_port,
                                                     limits=options.connection_limits("oxia")))
        stack.push_async_callback(oxia.stop)
        metadata_url = f"oxia://{advertised(options.bind, None)}:{oxia.port}"
        meta = engine.client(namespace="default", identity=f"standalone-{os.getpid()}",
                             session_timeout=config.session_timeout)
        stack.push_async_callback(meta.close)
        await mark_standalone(meta, config.data_dir)
        node = await until_stopped(start_broker(stack, meta, objects, objects_url=objects_url,
                                                metadata_url=metadata_url, options=options), stop)
        if node is None:
            return
        children = [asyncio.ensure_future(_supervise_child(i, config, metadata_url, objects_url, stop))
                    for i in range(1, config.brokers)]
        failed: list[ChildBrokerFailed] = []

        def _child_done(task: asyncio.Task) -> None:
            if not task.cancelled() and isinstance(task.exception(), ChildBrokerFailed):
                failed.append(task.exception())
                stop.set()

        for child in children:
            child.add_done_callback(_child_done)
            stack.push_async_callback(_cancel_and_wait, child)
        log.info("nereus standalone ready: http=%s:%d pulsar=%d kafka=%d oxia=%d data=%s objects=%s brokers=%d",
                 options.bind, node.http_port, node.pulsar.port, node.kafka.port, oxia.port, config.data_dir,
                 objects_url, config.brokers)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("shutting down")
        await node.drain()
        if failed:
            raise failed[0]


async def _cancel_and_wait(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, ChildBrokerFailed):  # a failure is raised by its watcher
        await task


def standalone_sbt_catalog(data_dir: Path, objects_url: str) -> str | None:
    """A standalone keeps its built-in tables' catalog in its data directory when its object store is
    not ``file://`` (beside a ``file://`` store is every broker's default: None)."""
    if objects_url.startswith("file:"):
        return None
    return "sqlite:///" + str((data_dir / "iceberg" / "catalog.db").resolve())


class ChildBrokerFailed(RuntimeError):
    """A broker process of ``--brokers N`` could not start (its own error line is printed above)."""


def child_command(index: int, config: StandaloneConfig, metadata_url: str, objects_url: str) -> list[str]:
    """The ``nereus broker`` command line of child broker ``index``: the standalone's options, its ports + ``index``."""
    given = {**config.given, "log_dir": config.given.get("log_dir") or config.data_dir / "logs",
             "sbt_catalog": config.given.get("sbt_catalog") or standalone_sbt_catalog(config.data_dir, objects_url)}
    return [sys.executable, "-m", "nereus.cli", "--lifeline-stdin",
            "--log-level", logging.getLevelName(log.getEffectiveLevel()),
            "broker", "--metadata", metadata_url, "--object-store", objects_url,
            "--wal-dir", str(config.data_dir / f"wal-{index}"), *child_args(given, index)]


async def _relay_stderr(stream: asyncio.StreamReader) -> str:
    """Copy a child's stderr (its log) to ours; returns its last line (its error, if it failed)."""
    last = b""
    while line := await stream.readline():
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
        if line.strip():
            last = line
    return last.decode(errors="replace").strip()


async def _end_relay(relay: asyncio.Task) -> str:
    """The child is gone: its stderr ends once its own children let go of it too."""
    try:
        return await wait_for(asyncio.shield(relay), 5)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        relay.cancel()
        return ""


async def _supervise_child(index: int, config: StandaloneConfig, metadata_url: str, objects_url: str,
                           stop: asyncio.Event) -> None:
    """Keep child broker ``index`` running; on cancel, stop it gracefully (SIGTERM, then SIGKILL).

    A child that exits while the standalone stops (a Ctrl-C reaches the whole process
    group) is not restarted.
    """
    command = child_command(index, config, metadata_url, objects_url)
    first = True
    while True:
        # stdin: the child's lifeline (nereus.lifeline): it stops when this process dies, however.
        proc = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        log.info("broker %d started (pid %d)", index, proc.pid)
        relay = asyncio.ensure_future(_relay_stderr(proc.stderr))
        try:
            code = await proc.wait()
        except asyncio.CancelledError:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                await wait_for(proc.wait(), 30)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
            raise
        finally:
            last_line = await _end_relay(relay)
        if first and code == 1 and not stop.is_set():  # a start-up failure (a port in use ...): restarting won't help
            error = last_line.removeprefix("Error: ") or f"exit code {code}"
            raise ChildBrokerFailed(f"broker process {index} could not start: {error} (it listens on the given "
                                    f"ports + {index})")
        first = False
        # A Ctrl-C reaches the child and the standalone at once: give the stop a moment to show.
        with contextlib.suppress(asyncio.TimeoutError):
            await wait_for(stop.wait(), CHILD_RESTART_SECONDS)
        if stop.is_set():
            log.info("broker %d stopped (exit code %s)", index, code)
            return
        log.warning("broker %d exited with %s; restarting it", index, code)


__all__ = ["ChildBrokerFailed", "StandaloneConfig", "child_command", "install_stop_signals", "run_standalone", "until_stopped"]
