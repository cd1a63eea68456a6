"""Background upload: objects acknowledged on WAL replicas reach the object store.

The object goes to the store under the name its index entries already use, so
nothing in the offset index changes: a reader that finds the object in the store
reads it there, and one that does not finds the block's replicas from its pending
marker (``wal_locator``). Only objects with committed slices are uploaded; a name
whose commit failed is sealed empty and never referenced.

With ``grouped`` (the writer's names say so, ``wal_groups``), the objects of a block are
not uploaded one by one: once the block is closed and every name of it sealed, its
committed objects go up as one group object, whose record says where each lies.

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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from ..meta import MetadataStore
from ..objstore import ObjectExists, ObjectNotFound, ObjectStore
from . import metrics, wal_groups, wal_replicas
from .wal_blocks import NameBlock, NameBlocks
from .wal_replicas import ReplicaDirectory

log = logging.getLogger(__name__)

T = TypeVar("T")

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


@dataclass(slots=True)
class _Group:
    key: str
    block: NameBlock
    members: list[_Upload]


class Uploader:
    """Uploads one writer's replica-held objects, oldest first, ``concurrency`` at a time.

    ``blocks`` (the writer's names) is set by the writer before the first ``add``."""

    def __init__(self, objects: ObjectStore, directory: ReplicaDirectory, meta: MetadataStore, *,
                 max_held_bytes: int, memory_bytes: int, concurrency: int = 8, grouped: bool = False):
        self.objects = objects
        self.directory = directory
        self.meta = meta
        self.blocks: NameBlocks | None = None
        self.grouped = grouped
        self._gathering: dict[NameBlock, list[_Upload]] = {}  # grouped: a block's objects until it is whole
        self.max_held_bytes = max_held_bytes
        self.memory_bytes = memory_bytes
        self.concurrency = concurrency
        self.held_bytes = 0  # acknowledged, not yet in the object store
        self._in_memory = 0
        self._queue: deque[_Upload | _Group] = deque()
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
        if self.held_bytes >= self.max_held_bytes:
            self._room.clear()
        if self.grouped:
            self._gathering.setdefault(block, []).append(upload)
        else:
            self._enqueue(upload)

    def settled(self, block: NameBlock) -> None:
        """One more name of ``block`` is sealed (and, if committed, added)."""
        block.settled += 1
        self._group_if_whole(block)

    def closed(self, block: NameBlock) -> None:
        """``block`` hands out no more names."""
        self._group_if_whole(block)

    def _group_if_whole(self, block: NameBlock) -> None:
        if not self.grouped or not block.closed or block.settled < block.used:
            return
        members = self._gathering.pop(block, None)
        if members:
            members.sort(key=lambda u: u.key)  # the group's layout follows the names
            self._enqueue(_Group(wal_groups.group_name(self.blocks.prefix, block.first), block, members))

    def _enqueue(self, item: _Upload | _Group) -> None:
        self._queue.append(item)
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
            item = self._queue.popleft()
            if isinstance(item, _Group):
                await self._upload_group(item)
            else:
                await self._upload(item)

    async def _retrying(self, block: NameBlock, what: str, attempt: Callable[[], Awaitable[T]]) -> T | None:
        """``attempt()``'s result once it succeeds, retried for as long as the store refuses it;
        None once the collector took ``block`` (its writer stalled past the timeout: the
        collector uploads the block's objects from the replicas)."""
        delay = _RETRY_FIRST
        while not block.claimed:
            try:
                return await attempt()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("uploading WAL %s failed (%s); retrying in %.1f s", what, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _RETRY_MAX)
        return None

    async def _upload(self, upload: _Upload) -> None:
        async def put() -> bool:
            data = upload.data
            if data is None:
                data = [await wal_replicas.read(self.directory, upload.replicas, upload.key)]
            try:
                await metrics.put_object(self.objects, upload.key, data, "wal_upload")
            except ObjectExists:
                pass  # uploaded before (a retry whose first put landed, or a recovery)
            return True

        if await self._retrying(upload.block, f"object {upload.key}", put):
            metrics.WAL_UPLOAD_SECONDS.observe(time.monotonic() - upload.since)
        else:
            log.info("WAL object %s is left to the collector (its block was taken)", upload.key)
        self._release(upload)
        self.blocks.finished(upload.block)

    async def _upload_group(self, group: _Group) -> None:
        """Put the block's objects as one, then record where each lies; each is then done. A
        block the collector took is left to it."""
        async def put_and_seal() -> bool:
            parts = [u.data if u.data is not None else
                     [await wal_replicas.read(self.directory, u.replicas, u.key)] for u in group.members]
            layout: dict[int, tuple[int, int]] = {}
            chunks: list = []
            position = 0
            for upload, data in zip(group.members, parts):
                layout[wal_groups.group_of(upload.key)[1]] = (position, upload.size)
                chunks += data
                position += upload.size
            if not await self._put_group(group.key, chunks, position):
                return False
            return await wal_groups.seal(self.meta, group.key, layout, int(time.time() * 1000))

        sealed = await self._retrying(group.block, f"group {group.key}", put_and_seal)
        if not sealed:
            group.block.claimed = True  # its marker is the collector's: it resolves every name
            log.info("WAL group %s is left to the collector (its block was taken)", group.key)
        now = time.monotonic()
        for upload in group.members:
            if sealed:
                metrics.WAL_UPLOAD_SECONDS.observe(now - upload.since)
            self._release(upload)
            self.blocks.finished(upload.block)

    async def _put_group(self, key: str, chunks: list, size: int) -> bool:
        """Put the group object; False when its name holds something else (the collector's
        tombstone: the block was taken)."""
        try:
            await metrics.put_object(self.objects, key, chunks, "wal_upload")
            return True
        except ObjectExists:
            try:  # a retry whose first put landed, or the collector's claim of the name
                return (await self.objects.head(key)).size == size and \
                    await self.objects.get(key) == b"".join(bytes(c) for c in chunks)
            except ObjectNotFound:
                raise ObjectExists(key) from None  # deleted meanwhile: try again

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
