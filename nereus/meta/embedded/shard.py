"""One shard: an operation queue drained by a dedicated thread with group commit.

Callers (on any event loop, or the sweeper thread) append operations to the queue.
The shard thread takes EVERYTHING queued while it was busy with the previous batch,
applies it in one LMDB transaction, commits (+ fsync when durable), and only then
hands the results back: one ``call_soon_threadsafe`` per event loop per batch.

Point reads (``read``) skip the queue: the caller's thread answers them from the last
committed transaction, as Oxia serves reads from its committed state. A read issued
after a write was acknowledged still sees that write (the acknowledgement follows the
commit: linearizable per key); a read never waits behind a batch's fsync, nor for two
thread switches. Scans, writes and sessions go through the queue in arrival order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections import deque
from typing import Any

import lmdb

from ..errors import MetadataClosed, MetadataError, MetadataUnavailable
from .notify import NotificationHub
from .residency import MapResidency
from .sessions import Clock, SessionTable
from .store import POINT_READS, ShardStore

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
        # Held by point reads while their transaction is open, and by the shard thread to
        # resize or close the environment (LMDB forbids both while any transaction is open).
        self._env_lock = threading.Lock()
        self._unchecked = 0  # batches and point reads since the residency was last checked
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

    def read(self, opcode: int, *args: Any) -> "asyncio.Future[Any]":
        """A point read (GET, GET_INDEX) answered now from committed state; the future is done.

        Until the store is open (or once the shard is closing) it is queued as ``call`` does.
        """
        if opcode not in POINT_READS:
            raise ValueError(f"opcode {opcode} is not a point read")
        fut = asyncio.get_running_loop().create_future()
        with self._env_lock:
            store = self._store
            if store is not None and not self._closed:
                self._unchecked += 1
                if self._unchecked == 1 and self._idle:
                    self._wake.set()  # the thread checks the pages these reads map (_idle_wait)
                try:
                    fut.set_result(store.read(opcode, args))
                except MetadataError as e:
                    fut.set_exception(e)
                except lmdb.Error as e:
                    log.exception("shard %s failed a read", self.name)
                    fut.set_exception(MetadataUnavailable(f"shard {self.name} failed a read: {e}"))
                return fut
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
            store = ShardStore(self._path, durable=self._durable, map_size=self._map_size,
                               now_ms=self._clock.now_ms, env_guard=self._env_lock)
            for sid, timeout_ms, ident in store.sessions():
                self.sessions.opened(sid, timeout_ms, ident)  # fresh deadline after restart
            self._store = store
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
                        self._wake.wait(self._idle_wait())
                    self._wake.clear()
                    self._idle = False
                    if not queue:
                        self._check_residency()
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
                    with self._env_lock:
                        self._unchecked += 1
                    self._check_residency()
                if stop:
                    break
        finally:
            with self._env_lock:
                store, self._store = self._store, None
                if store is not None:
                    store.close()
            self.stopped.set()

    def _idle_wait(self) -> float | None:
        """How long the idle thread may sleep: until its residency check is due if batches or
        point reads (which map pages without waking it) came since the last one, else until woken."""
        if self.residency is None or not self.residency.active or not self._unchecked:
            return None
        return self.residency.due_in()

    def _check_residency(self) -> None:
        if self.residency is not None:
            unchecked = self._unchecked
            if self.residency.maybe_trim():
                with self._env_lock:  # reads counted meanwhile wait for the next check
                    self._unchecked -= unchecked

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
