"""Blocks of WAL object names, reserved in the metadata plane ahead of need.

A writer never writes an object whose name no metadata record announces: it
reserves a block of names with one pending marker (``gc.reserve``), so a crash at
any point leaves a trace the collector resolves, and the ack path needs no
metadata write. A block is used for at most ``reservation_ttl`` (the collector
takes blocks older than its pending timeout for a dead writer's); the next block
is reserved ahead, once half of this one is used or its life half gone.

A name is *done* once its object record is sealed and, for objects on WAL replicas,
the object is uploaded. The marker goes when the block is closed and every name
it handed out is done. On WAL replicas a block may outlive its ttl (uploads wait
for a store that is down): the writer touches its marker so the collector does not
take a live writer's block, and deletes it only at the version it last wrote, so a
block the collector did take (a stall past the timeout) stays the collector's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Callable

from ..meta import MetadataStore, UnexpectedVersion
from . import gc, records

log = logging.getLogger(__name__)

#: Chooses a block's WAL replicas: ``(replicas that just failed) -> ensemble`` (empty: the object store).
EnsembleChooser = Callable[[tuple[str, ...]], list[str]]


@dataclass(slots=True, eq=False)
class NameBlock:
    first: int
    count: int
    created: float
    marker: str = ""
    marker_version: int | None = None
    marker_value: dict | None = None
    used: int = 0
    done: int = 0
    closed: bool = False
    claimed: bool = False  # the collector took the block for a dead writer's
    ensemble: tuple[str, ...] = ()  # the WAL replicas of its objects (none: straight to the object store)
    write_quorum: int = 0
    ack_quorum: int = 0
    touched: float = 0.0
    first_used: float = 0.0
    written: int = 0  # bytes of the objects written under its names
    settled: int = 0  # names sealed (committed or not): a grouped block uploads once all are

    def index(self, name_seq: int) -> int:
        return name_seq - self.first


class NameBlocks:
    """Hands out object names from reserved blocks; deletes a block's marker once it is done."""

    def __init__(self, meta: MetadataStore, prefix: str, *, size: int, ttl: float,
                 choose: EnsembleChooser | None = None, write_quorum: int = 0, ack_quorum: int = 0,
                 track: Callable = asyncio.ensure_future,
                 on_done: Callable[[NameBlock], None] | None = None,
                 on_closed: Callable[[NameBlock], None] | None = None, group_seconds: float = 0.0,
                 group_bytes: int = 0):
        """``group_seconds``: a block is closed that long after its first name was handed out, or
        once ``group_bytes`` were written under its names (its names are uploaded together once
        it is closed; 0: only when full or old)."""
        self.meta = meta
        self.prefix = prefix
        self.size = size
        self.ttl = ttl
        self.choose = choose
        self.write_quorum = write_quorum
        self.ack_quorum = ack_quorum
        self._track = track
        self._on_done = on_done  # after a block's marker was deleted (its replicas may drop it)
        self._on_closed = on_closed
        self.group_seconds = group_seconds
        self.group_bytes = group_bytes
        self._next_first = 0
        self._current: NameBlock | None = None
        self._spare: asyncio.Task | None = None
        self._naming = asyncio.Lock()
        self._open: set[NameBlock] = set()  # blocks whose marker still exists

    async def next_name(self, *, avoid: tuple[str, ...] = ()) -> tuple[str, NameBlock]:
        """A fresh name and its block. ``avoid``: WAL replicas that just failed; a block
        whose ensemble has one is closed and the name comes from a new block without it."""
        async with self._naming:
            block = self._current
            if block is not None and (set(avoid) & set(block.ensemble)):
                self.close(block)
                block = None
            if block is None or block.closed or block.used >= block.count or self.expired(block) \
                    or self._group_due(block):
                if block is not None and not block.closed:
                    self.close(block)
                block = await self._take_spare(avoid)
                if block is None:
                    block = await self._reserve(avoid)
                self._current = block
            seq = block.first + block.used
            if not block.used:
                block.first_used = time.monotonic()
            block.used += 1
            half_used = block.used * 2 >= block.count or (time.monotonic() - block.created) * 2 > self.ttl
            if self._spare is None and half_used:
                self._spare = asyncio.ensure_future(self._reserve(()))
            return gc.object_name(self.prefix, seq), block

    async def _take_spare(self, avoid: tuple[str, ...]) -> NameBlock | None:
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        try:
            block = await spare
        except Exception as exc:  # reserve anew below
            log.info("reserving a spare block of WAL names failed: %s", exc)
            return None
        # A spare that sat unused while the writer was idle is as old as its marker:
        # the collector may take it for a dead writer's soon.
        if self.expired(block) or set(avoid) & set(block.ensemble):
            self.close(block)
            return None
        return block

    def expired(self, block: NameBlock) -> bool:
        return block.claimed or time.monotonic() - block.created > self.ttl

    def _group_due(self, block: NameBlock) -> bool:
        if not self.group_seconds or not block.used:
            return False
        return time.monotonic() - block.first_used >= self.group_seconds or block.written >= self.group_bytes

    async def _reserve(self, avoid: tuple[str, ...]) -> NameBlock:
        first = self._next_first
        self._next_first += self.size
        block = NameBlock(first, self.size, time.monotonic())
        extra = None
        if self.choose is not None:
            block.ensemble = tuple(self.choose(avoid))
            block.write_quorum = min(self.write_quorum, len(block.ensemble))
            block.ack_quorum = self.ack_quorum
            extra = {"wal": {"ensemble": list(block.ensemble), "write": block.write_quorum,
                             "ack": block.ack_quorum}}
        block.marker, block.marker_version, block.marker_value = await gc.reserve(self.meta, self.prefix, first,
                                                                                  self.size, extra)
        block.touched = time.monotonic()
        self._open.add(block)
        return block

    def close(self, block: NameBlock) -> None:
        """No more names from ``block``; its marker goes once every name handed out is done."""
        if block.closed:
            return
        block.closed = True
        if self._on_closed is not None:
            self._on_closed(block)
        if block.done == block.used:
            self._track(self._delete_marker(block))

    def finished(self, block: NameBlock) -> None:
        """One name of ``block`` is done (sealed, and uploaded when on WAL replicas)."""
        block.done += 1
        if block.closed and block.done == block.used:
            self._track(self._delete_marker(block))

    async def _delete_marker(self, block: NameBlock) -> None:
        self._open.discard(block)
        if block.claimed:
            return  # the collector's now
        try:
            await self.meta.delete(block.marker, expected_version_id=block.marker_version)
        except UnexpectedVersion:
            log.info("block %s was taken by the collector; left to it", block.marker)
            return
        if self._on_done is not None:
            self._on_done(block)

    def retire_expired(self) -> None:
        """Close the current block (and an unused spare) once its life (or its group time) is
        over though no name was asked for: an idle writer's marker then goes as soon as its
        names are done, rather than at the next append (the collector keeps a block's freed
        objects until then), and its group is uploaded."""
        block = self._current
        if block is not None and not block.closed and (self.expired(block) or self._group_due(block)):
            self.close(block)
        spare = self._spare
        if spare is not None and spare.done() and not spare.cancelled() and spare.exception() is None \
                and self.expired(spare.result()):
            self._spare = None
            self.close(spare.result())

    async def touch_old_markers(self, older_than: float) -> None:
        """Rewrite the markers of blocks whose names wait for upload, last written ``older_than``
        seconds ago, so the collector does not take a live writer's block; a block it took is
        marked ``claimed``."""
        now = time.monotonic()
        for block in list(self._open):
            if block.claimed or block.done >= block.used or now - block.touched < older_than:
                continue
            value = {**block.marker_value, "ts": int(time.time() * 1000)}
            try:
                result = await self.meta.put(block.marker, records.encode(value),
                                             expected_version_id=block.marker_version)
            except UnexpectedVersion:
                block.claimed = True
                self._open.discard(block)
                continue
            block.marker_version, block.marker_value = result.version.version_id, value
            block.touched = now

    @property
    def current(self) -> NameBlock | None:
        return self._current

    @property
    def spare(self) -> asyncio.Task | None:
        return self._spare

    async def close_all(self) -> None:
        if self._current is not None:
            self.close(self._current)
        spare, self._spare = self._spare, None
        if spare is not None:
            try:
                self.close(await spare)
            except Exception:  # never reserved: nothing to close
                pass


__all__ = ["EnsembleChooser", "NameBlock", "NameBlocks"]
