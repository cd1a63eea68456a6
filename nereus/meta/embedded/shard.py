"""One shard: an operation queue drained by a dedicated thread with group commit.

Callers (on any event loop, or the sweeper thread) append operations to the queue.
The shard thread takes EVERYTHING queued while it was busy with the previous batch,
applies it in one LMDB transaction, commits (+ fsync when durable), and only then
hands the results back: one ``call_soon_threadsafe`` per event loop per batch. All
operations, reads included, go through this queue in arrival order, so a read
issued after a write was acknowledged sees that write (linearizable per key).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from typing import Any

from ..errors import MetadataClosed, MetadataUnavailable
from .notify import NotificationHub
from .residency import MapResidency
from .sessions import Clock, SessionTable
from .store import ShardStore

log = logging.getLogger(__name__)

_STOP = object()
MAX_BATCH = 20_000  # bounds one transaction's size and the latency of its first op


class Shard:
    """A shard of a namespace; ``path`` is its LMDB directory."""

    def __init__(self, name: str, path: str, *, durable: bool, map_size: int, clock: Clock,
                 hub: NotificationHub, index: int = 0,
                 resident: tuple[int, float] = (0, 0.0)):
        self.name = name
        self.index = index  # position in the namespace (hash-range order)
        self.sessions = SessionTable(clock)
        self._path = path
        self._durable = durable
        self._map_size = map_size
        self._resident = resident  # (budget bytes, check interval s) of the mapped pages
        self.residency: MapResidency | None = None
        self._clock = clock
        self._hub = hub
        self._queue: deque[Any] = deque()
        self._wake = threading.Event()
        self._idle = False
        self._closed = False
        self._store: ShardStore | None = None
        self._open_error: BaseException | None = None
        self.batches = 0  # committed batches (group-commit tests count these)
        self.ops = 0
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"meta-{name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ loop side
    def call(self, opcode: int, *args: Any) -> "asyncio.Future[Any]":
        """Queue an operation; the returned future resolves after its batch committed."""
        fut = asyncio.get_running_loop().create_future()
        self.submit((opcode, fut) + args)
        return fut

    def submit(self, op: tuple) -> None:
        """Queue an operation from any thread (``op[1]`` is its future or None)."""
        if self._closed:
            raise MetadataClosed("metadata engine is closed")
        self._queue.append(op)
        # The thread sets _idle before re-checking the queue, so either it sees this
        # op or we see _idle and wake it (no lost wake-up; GIL orders these steps).
        if self._idle:
            self._wake.set()

    def submit_many(self, ops: list[tuple]) -> None:
        """Queue operations from any thread, all visible to the shard thread at once."""
        if self._closed:
            raise MetadataClosed("metadata engine is closed")
        self._queue.extend(ops)  # one step under the GIL: the thread takes all of them or none
        if self._idle:
            self._wake.set()

    def close(self) -> None:
        """Stop accepting operations; the thread finishes the queued ones and exits."""
        if not self._closed:
            self._closed = True
            self._queue.append(_STOP)
            self._wake.set()

    # ---------------------------------------------------------- thread side
    def _run(self) -> None:
        try:
            os.makedirs(self._path, exist_ok=True)
            self._store = ShardStore(self._path, durable=self._durable, map_size=self._map_size,
                                     now_ms=self._clock.now_ms)
            for sid, timeout_ms, ident in self._store.sessions():
                self.sessions.opened(sid, timeout_ms, ident)  # fresh deadline after restart
            self.residency = MapResidency(self._path, self._resident[0], interval=self._resident[1])
        except BaseException as e:  # report on every op rather than dying silently
            log.exception("cannot open shard %s at %s", self.name, self._path)
            self._open_error = e
        queue = self._queue
        try:
            while True:
                if not queue:
                    self._idle = True
                    if not queue:
                        self._wake.wait()
                    self._wake.clear()
                    self._idle = False
                    continue
                batch = []
                stop = False
                while queue and len(batch) < MAX_BATCH:
                    op = queue.popleft()
                    if op is _STOP:
                        stop = True
                        break
                    batch.append(op)
                if batch:
                    self._run_batch(batch)
                    if self.residency is not None:
                        self.residency.maybe_trim()
                if stop:
                    break
        finally:
            if self._store is not None:
                self._store.close()
            self.stopped.set()

    def _run_batch(self, batch: list[tuple]) -> None:
        notes: list | None = [] if self._hub.active else None
        if self._open_error is not None:
            err = MetadataUnavailable(f"shard {self.name} failed to open: {self._open_error}")
            results = [(op[1], None, err) for op in batch]
        else:
            try:
                results, effects = self._store.execute(batch, notes)  # type: ignore[union-attr]
            except Exception as e:
                log.exception("shard %s failed to commit a batch of %d", self.name, len(batch))
                err = MetadataUnavailable(f"shard {self.name} failed to persist: {e}")
                results, effects, notes = [(op[1], None, err) for op in batch], [], None
            for effect in effects:  # committed: now visible to keepalive/expiry
                if effect[0] == "open":
                    self.sessions.opened(effect[1], effect[2], effect[3])
                else:
                    self.sessions.closed(effect[1])
            self.batches += 1
            self.ops += len(batch)
        if notes:
            self._hub.publish(notes, self.index)
        self._hand_back(results)

    @staticmethod
    def _hand_back(results: list[tuple]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple]] = {}
        for r in results:
            if r[0] is not None:
                loop = r[0].get_loop()
                lst = by_loop.get(loop)
                if lst is None:
                    by_loop[loop] = lst = []
                lst.append(r)
        for loop, lst in by_loop.items():
            try:
                loop.call_soon_threadsafe(_resolve, lst)
            except RuntimeError:  # the caller's loop is gone; nobody awaits these
                pass


def _resolve(results: list[tuple]) -> None:
    for fut, value, err in results:
        if fut.done():  # cancelled by its caller; the operation still happened
            continue
        if err is None:
            fut.set_result(value)
        else:
            fut.set_exception(err)
