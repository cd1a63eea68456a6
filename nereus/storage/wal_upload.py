"""Background upload: objects acknowledged on WAL replicas reach the object store.

The object goes to the store under the name its index entries already use, so
nothing in the offset index changes: a reader that finds the object in the store
reads it there, and one that does not finds the block's replicas from its pending
marker (``wal_locator``). Only objects with committed slices are uploaded; a name
whose commit failed is sealed empty and never referenced.

Uploads run concurrently and retry for as long as the store refuses them (the WAL
keeps growing meanwhile); once ``max_held_bytes`` wait for upload, appends wait too
(back-pressure). The bytes stay in memory up to ``memory_bytes``; beyond that an
upload reads them back from a replica.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from dataclasses import dataclass

from ..objstore import ObjectExists, ObjectStore
from . import metrics, wal_replicas
from .wal_blocks import NameBlock, NameBlocks
from .wal_replicas import ReplicaDirectory

log = logging.getLogger(__name__)

_RETRY_FIRST = 0.2
_RETRY_MAX = 5.0


@dataclass(slots=True)
class _Upload:
    key: str
    block: NameBlock
    replicas: list[str]
    size: int
    data: list | None  # None once dropped from memory: read back from a replica
    since: float


class Uploader:
    """Uploads one writer's replica-held objects, oldest first, ``concurrency`` at a time."""

    def __init__(self, objects: ObjectStore, directory: ReplicaDirectory, blocks: NameBlocks, *,
                 max_held_bytes: int, memory_bytes: int, concurrency: int = 8):
        self.objects = objects
        self.directory = directory
        self.blocks = blocks
        self.max_held_bytes = max_held_bytes
        self.memory_bytes = memory_bytes
        self.concurrency = concurrency
        self.held_bytes = 0  # acknowledged, not yet in the object store
        self._in_memory = 0
        self._queue: deque[_Upload] = deque()
        self._held: dict[str, _Upload] = {}
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._empty = asyncio.Event()
        self._empty.set()
        self._workers: list[asyncio.Task] = []
        self._closed = False

    def add(self, key: str, block: NameBlock, replicas: list[str], data: list) -> None:
        """Upload ``key`` (its bytes ``data``, also on ``replicas``), then mark its name done."""
        size = sum(memoryview(c).nbytes for c in data)
        keep = self._in_memory + size <= self.memory_bytes
        upload = _Upload(key, block, replicas, size, data if keep else None, time.monotonic())
        if keep:
            self._in_memory += size
        self.held_bytes += size
        metrics.WAL_HELD_BYTES.set(self.held_bytes)
        self._held[key] = upload
        self._empty.clear()
        self._queue.append(upload)
        if self.held_bytes >= self.max_held_bytes:
            self._room.clear()
        if not self._workers:
            self._workers = [asyncio.ensure_future(self._work()) for _ in range(self.concurrency)]
        self._wake.set()

    def held(self, key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of an object waiting for upload, if still in memory."""
        upload = self._held.get(key)
        if upload is None or upload.data is None:
            return None
        return b"".join(upload.data)[start:end]

    async def room(self) -> None:
        """Wait while ``max_held_bytes`` are waiting for upload (the store is slow or down)."""
        if self._room.is_set():
            return
        metrics.WAL_APPENDS_WAITING.inc()
        try:
            while not self._room.is_set():
                await self._room.wait()
        finally:
            metrics.WAL_APPENDS_WAITING.dec()

    @property
    def pending(self) -> int:
        return len(self._held)

    def oldest_age(self) -> float:
        """Seconds the oldest waiting upload has waited (0 when none waits)."""
        return time.monotonic() - min((u.since for u in self._held.values()), default=time.monotonic())

    async def _work(self) -> None:
        while not self._closed:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            upload = self._queue.popleft()
            await self._upload(upload)

    async def _upload(self, upload: _Upload) -> None:
        delay = _RETRY_FIRST
        while not upload.block.claimed:
            try:
                data = upload.data
                if data is None:
                    data = [await wal_replicas.read(self.directory, upload.replicas, upload.key)]
                try:
                    await metrics.put_object(self.objects, upload.key, data, "wal_upload")
                except ObjectExists:
                    pass  # uploaded before (a retry whose first put landed, or a recovery)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("uploading WAL object %s failed (%s); retrying in %.1f s", upload.key, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
        if upload.block.claimed:
            log.info("WAL object %s is left to the collector (its block was taken)", upload.key)
        else:
            metrics.WAL_UPLOAD_SECONDS.observe(time.monotonic() - upload.since)
        self._release(upload)
        self.blocks.finished(upload.block)

    def _release(self, upload: _Upload) -> None:
        del self._held[upload.key]
        self.held_bytes -= upload.size
        metrics.WAL_HELD_BYTES.set(self.held_bytes)
        if upload.data is not None:
            self._in_memory -= upload.size
            upload.data = None
        if self.held_bytes < self.max_held_bytes:
            self._room.set()
        if not self._held:
            self._empty.set()

    async def drain(self) -> None:
        """Wait until every object added so far is uploaded (or left to the collector); at
        once after ``close`` (what is left is the collector's)."""
        if self._closed:
            return
        await self._empty.wait()

    async def close(self) -> None:
        """Stop uploading; the objects still waiting are left to the collector."""
        self._closed = True
        self._empty.set()
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)


__all__ = ["Uploader"]
