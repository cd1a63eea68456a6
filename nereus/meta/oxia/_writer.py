"""Write batching: everything queued for a shard goes out as one WriteStream message.

One ``ShardWriter`` per shard keeps a ``WriteStream`` open to the shard's leader.
Writes queue up while earlier batches are in flight (at most ``max_inflight``), so
the batch size follows the load, as the server's group commit does.

Outcomes when the stream breaks: writes never sent are sent again on a new stream;
writes sent but unanswered may or may not have been applied, so they fail with
``MetadataUnavailable`` rather than being replayed (a replayed conditional write
could report a conflict with itself).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

import grpc

from ..errors import InvalidRequest, MetadataClosed, MetadataUnavailable
from ._conn import Backoff, Connection, error_from_rpc
from .proto import client_pb2 as pb

log = logging.getLogger(__name__)

PUT, DELETE, DELETE_RANGE = 0, 1, 2  # the order a WriteRequest applies its lists in
MAX_OPS = 5000
MAX_BYTES = 4 << 20


class _Op:
    __slots__ = ("kind", "msg", "fut", "size", "deadline")

    def __init__(self, kind: int, msg, fut: asyncio.Future, size: int, deadline: float):
        self.kind, self.msg, self.fut, self.size, self.deadline = kind, msg, fut, size, deadline


class ShardWriter:
    """The write queue and stream of one shard."""

    def __init__(self, conn: Connection, shard_id: int, max_inflight: int = 2):
        self._conn = conn
        self.shard_id = shard_id
        self._max_inflight = max_inflight
        self._queue: deque[_Op] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, kind: int, msg, size: int) -> asyncio.Future:
        """Queue one put/delete/delete-range message; resolves to its response message."""
        if self._conn.closed:
            raise MetadataClosed("metadata client is closed")
        fut = asyncio.get_running_loop().create_future()
        self._queue.append(_Op(kind, msg, fut, size, time.monotonic() + self._conn.retry_timeout))
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"oxia-writer-{self.shard_id}")
        return fut

    def _take_batch(self) -> list[_Op]:
        # A WriteRequest applies puts, then deletes, then ranges: cut the batch where
        # the queue goes back to an earlier kind so submission order is kept.
        batch: list[_Op] = []
        size, kind = 0, PUT
        q = self._queue
        while q and len(batch) < MAX_OPS and (not batch or size + q[0].size <= MAX_BYTES):
            op = q[0]
            if op.kind < kind:
                break
            q.popleft()
            if op.fut.done():  # cancelled by its caller before it was sent
                continue
            kind, size = op.kind, size + op.size
            batch.append(op)
        return batch

    def _request(self, batch: list[_Op]) -> pb.WriteRequest:
        req = pb.WriteRequest(shard=self.shard_id)
        lists = (req.puts, req.deletes, req.delete_ranges)
        for op in batch:
            lists[op.kind].append(op.msg)
        return req

    def _expire(self) -> None:
        now = time.monotonic()
        while self._queue and self._queue[0].deadline < now:
            op = self._queue.popleft()
            if not op.fut.done():
                op.fut.set_exception(MetadataUnavailable("no connection to the shard leader"))

    async def _run(self) -> None:
        backoff = Backoff()
        while not self._conn.closed:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._conn.ready()
                leader = self._conn.shard(self.shard_id).leader
                await self._stream(leader)
                backoff.reset()
            except asyncio.CancelledError:
                break
            except Exception as e:  # connection trouble: retry what was never sent
                log.debug("write stream of shard %d failed: %s", self.shard_id, e)
                self._expire()
                await backoff.wait()
        self._fail_all(MetadataClosed("metadata client is closed"))

    async def _stream(self, leader: str) -> None:
        call = self._conn.stub(leader).WriteStream(metadata=self._conn.shard_metadata(self.shard_id))
        inflight: deque[list[_Op]] = deque()
        state = {"done_sending": False}

        async def responses() -> None:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    if state["done_sending"] and not inflight:
                        return
                    raise MetadataUnavailable("write stream closed by the server")
                batch = inflight.popleft()
                self._wake.set()  # a slot is free
                results = [*resp.puts, *resp.deletes, *resp.delete_ranges]
                for op, res in zip(batch, results):
                    if not op.fut.done():
                        op.fut.set_result(res)

        reader = asyncio.create_task(responses())
        idle_since = time.monotonic()
        try:
            while not reader.done():
                if self._queue and len(inflight) < self._max_inflight:
                    batch = self._take_batch()
                    if batch:
                        inflight.append(batch)
                        await call.write(self._request(batch))
                        idle_since = time.monotonic()
                    continue
                if not self._queue and not inflight and time.monotonic() - idle_since > 30:
                    state["done_sending"] = True  # idle: let the stream go
                    await call.done_writing()
                    break
                self._wake.clear()
                waiter = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait({waiter, reader}, timeout=10, return_when=asyncio.FIRST_COMPLETED)
                finally:  # also when this task is cancelled while waiting
                    waiter.cancel()
            await reader
        except BaseException as e:
            self._fail_inflight(inflight, e)
            raise
        finally:
            reader.cancel()
            call.cancel()

    def _fail_inflight(self, inflight: deque[list[_Op]], exc: BaseException) -> None:
        if isinstance(exc, grpc.RpcError) and exc.code() == grpc.StatusCode.INVALID_ARGUMENT and inflight:
            # The server stopped at the first bad request: the later ones were never
            # applied, so they go back to the head of the queue.
            bad = inflight.popleft()
            for op in bad:
                if not op.fut.done():
                    op.fut.set_exception(InvalidRequest(exc.details() or "invalid request"))
            for batch in reversed(inflight):
                self._queue.extendleft(reversed(batch))
            inflight.clear()
            return
        err = error_from_rpc(exc) if isinstance(exc, grpc.RpcError) else MetadataUnavailable(str(exc))
        for batch in inflight:
            for op in batch:
                if not op.fut.done():
                    op.fut.set_exception(MetadataUnavailable(
                        f"connection lost while the write was in flight (it may have been applied): {err}"))
        inflight.clear()

    def _fail_all(self, exc: Exception) -> None:
        while self._queue:
            op = self._queue.popleft()
            if not op.fut.done():
                op.fut.set_exception(exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except BaseException:  # noqa: BLE001 - closing: the outcome no longer matters
                pass
        self._fail_all(MetadataClosed("metadata client is closed"))
