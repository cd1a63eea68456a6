"""`nereus standalone`: metadata engine, object store, StreamStorage and listeners in one process."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from ..meta import open_engine
from ..meta.oxia import start_oxia_server
from ..objstore import open_object_store
from ..kafka.server import KafkaService
from ..pulsar.server import PulsarService
from ..storage import GarbageCollector, StreamStorage
from ..topics import TopicRegistry
from .http import attach_admin, start_http

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StandaloneConfig:
    data_dir: Path
    bind: str = "127.0.0.1"
    http_port: int = 8080
    pulsar_port: int = 6650
    kafka_port: int = 9092
    oxia_port: int = 6648
    object_store: str | None = None  # default: file://{data_dir}/objects
    metadata_shards: int = 1
    gc_interval: float = 30.0
    gc_grace: float = 60.0
    gc_pending_timeout: float = 60.0
    compaction_interval: float = 15.0  # 0: no compaction schedule
    compaction_max_age: float = 15.0
    compaction_min_bytes: int = 8 << 20


async def _gc_loop(collector: GarbageCollector, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            stats = await collector.collect()
            if stats.deleted or stats.resolved:
                log.info("gc: %d object(s) deleted, %d crashed write(s) resolved", stats.deleted, stats.resolved)
        except Exception:
            log.exception("gc pass failed")


def _loopback(bind: str) -> str:
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


async def _cancel_and_wait(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def run_standalone(config: StandaloneConfig, *, ready: asyncio.Event | None = None) -> None:
    """Run until SIGINT/SIGTERM, then shut down cleanly."""
    config.data_dir.mkdir(parents=True, exist_ok=True)
    objects_url = config.object_store or (config.data_dir / "objects").resolve().as_uri()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)

    objects = open_object_store(objects_url)  # first: a bad URL fails before anything opens
    async with contextlib.AsyncExitStack() as stack:
        # Unwound in reverse order, also when a listener fails to start (port in use).
        stack.push_async_callback(objects.close)
        engine = open_engine(str(config.data_dir / "meta"), shards=config.metadata_shards)
        stack.push_async_callback(engine.close)
        oxia = await start_oxia_server(engine, config.bind, config.oxia_port)
        stack.push_async_callback(oxia.stop)
        meta = engine.client(namespace="default", identity=f"standalone-{os.getpid()}")
        stack.push_async_callback(meta.close)
        storage = StreamStorage(meta, objects, node_id=f"standalone-{os.getpid()}")
        stack.push_async_callback(storage.close)
        collector = GarbageCollector(meta, objects, grace_seconds=config.gc_grace,
                                     pending_timeout_seconds=config.gc_pending_timeout)
        gc_task = asyncio.ensure_future(_gc_loop(collector, config.gc_interval))
        stack.callback(gc_task.cancel)
        if config.compaction_interval > 0:
            from .compaction_schedule import CompactionSchedule, run_schedule

            schedule = CompactionSchedule(config.compaction_interval, config.compaction_max_age,
                                          config.compaction_min_bytes, f"oxia://{_loopback(config.bind)}:{oxia.port}",
                                          objects_url)
            compaction_task = asyncio.ensure_future(run_schedule(meta, schedule))
            stack.push_async_callback(_cancel_and_wait, compaction_task)
        http = await start_http(config.bind, config.http_port)
        stack.push_async_callback(http.cleanup)
        registry = TopicRegistry(storage, meta)
        registry.start()
        stack.push_async_callback(registry.close)
        pulsar = PulsarService(storage, meta, host=config.bind, port=config.pulsar_port, registry=registry)
        await pulsar.start()
        stack.push_async_callback(pulsar.stop)
        await attach_admin(http, storage=storage, meta=meta, pulsar=pulsar)
        kafka = KafkaService(storage, meta, registry, host=config.bind, port=config.kafka_port)
        await kafka.start()
        stack.push_async_callback(kafka.stop)
        log.info("nereus standalone ready: http=%s:%d pulsar=%d kafka=%d oxia=%d data=%s objects=%s", config.bind,
                 config.http_port, config.pulsar_port, config.kafka_port, config.oxia_port, config.data_dir,
                 objects_url)
        if ready is not None:
            ready.set()
        await stop.wait()
        log.info("shutting down")
