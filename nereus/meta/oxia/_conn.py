"""Client side plumbing: channels, the followed shard map, retries with backoff."""

from __future__ import annotations

import asyncio
import bisect
import logging
import random
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, TypeVar

import grpc
from grpc import aio

from ..errors import (InvalidRequest, MetadataClosed, MetadataError, MetadataUnavailable,
                      NamespaceNotFound, SessionNotFound)
from ..keys import key_hash
from . import convert as cv
from .proto import client_pb2 as pb
from .proto import service as pbg
from ...tasks import wait_for

log = logging.getLogger(__name__)
T = TypeVar("T")

#: gRPC codes after which the same call may succeed later (server restarting, shard moving).
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.FAILED_PRECONDITION,
             grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN}


class Backoff:
    """Exponential backoff with jitter, capped."""

    def __init__(self, start: float = 0.05, cap: float = 2.0):
        self.start, self.cap, self.delay = start, cap, start

    def reset(self) -> None:
        self.delay = self.start

    async def wait(self) -> None:
        await asyncio.sleep(self.delay * random.uniform(0.5, 1.0))
        self.delay = min(self.delay * 2, self.cap)


def error_from_rpc(e: grpc.RpcError) -> MetadataError:
    """The metadata-plane error for a failed call."""
    code, details = e.code(), e.details() or ""
    if code == grpc.StatusCode.NOT_FOUND and details == cv.SESSION_NOT_FOUND:
        return SessionNotFound(details)
    if code == grpc.StatusCode.NOT_FOUND and details == cv.NAMESPACE_NOT_FOUND:
        return NamespaceNotFound(details)
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
                grpc.StatusCode.UNIMPLEMENTED):
        return InvalidRequest(details)
    return MetadataUnavailable(f"{code.name}: {details}")


@dataclass(frozen=True, slots=True)
class ShardInfo:
    id: int
    leader: str
    lo: int
    hi: int


class Connection:
    """Channels to the servers of one namespace and its shard map, kept up to date."""

    def __init__(self, address: str, namespace: str, retry_timeout: float,
                 credentials: grpc.ChannelCredentials | None = None):
        self.address = address
        self.credentials = credentials  # TLS; None: plaintext
        self.namespace = namespace
        self.retry_timeout = retry_timeout
        self.metadata = ((cv.NAMESPACE_HEADER, namespace),)
        self.shards: list[ShardInfo] = []
        self._los: list[int] = []
        self._channels: dict[str, tuple[aio.Channel, pbg.OxiaClientStub]] = {}
        self._ready = asyncio.Event()
        self._error: MetadataError | None = None
        self._follower: asyncio.Task[None] | None = None
        self.closed = False

    def stub(self, leader: str) -> pbg.OxiaClientStub:
        entry = self._channels.get(leader)
        if entry is None:
            ch = (aio.insecure_channel(leader, options=cv.CLIENT_CHANNEL_OPTIONS) if self.credentials is None
                  else aio.secure_channel(leader, self.credentials, options=cv.CLIENT_CHANNEL_OPTIONS))
            entry = self._channels[leader] = (ch, pbg.OxiaClientStub(ch))
        return entry[1]

    async def ready(self) -> None:
        """Wait for the first shard map (starting to follow it on first use)."""
        if self.closed:
            raise MetadataClosed("metadata client is closed")
        if self._follower is None:
            self._follower = asyncio.create_task(self._follow(), name=f"oxia-assignments-{self.namespace}")
        if not self._ready.is_set():
            try:
                await wait_for(self._ready.wait(), self.retry_timeout)
            except asyncio.TimeoutError:
                raise self._error or MetadataUnavailable(f"no shard map from {self.address}") from None

    async def _follow(self) -> None:
        backoff = Backoff()
        while not self.closed:
            try:
                stream = self.stub(self.address).GetShardAssignments(
                    pb.ShardAssignmentsRequest(namespace=self.namespace), metadata=self.metadata)
                async for msg in stream:
                    self._apply(msg.namespaces[self.namespace])
                    backoff.reset()
            except grpc.RpcError as e:
                err = error_from_rpc(e)
                if isinstance(err, (NamespaceNotFound, InvalidRequest)):
                    self._error = err  # will not get better by retrying quickly
                if not self.closed:
                    log.debug("shard map stream of %s broke: %s", self.address, err)
            except asyncio.CancelledError:
                return
            if not self.closed:
                await backoff.wait()

    def _apply(self, nsa: pb.NamespaceShardsAssignment) -> None:
        if nsa.shard_key_router != pb.XXHASH3:
            self._error = InvalidRequest(f"unsupported shard key router {nsa.shard_key_router}")
            return
        shards = sorted((ShardInfo(a.shard, a.leader, a.int32_hash_range.min_hash_inclusive,
                                   a.int32_hash_range.max_hash_inclusive) for a in nsa.assignments),
                        key=lambda s: s.lo)
        self.shards, self._los = shards, [s.lo for s in shards]
        self._error = None
        self._ready.set()
        log.debug("namespace %s: %d shards", self.namespace, len(shards))

    def route(self, routing_key: str) -> ShardInfo:
        i = bisect.bisect_right(self._los, key_hash(routing_key)) - 1
        return self.shards[max(i, 0)]

    def shard(self, shard_id: int) -> ShardInfo:
        for s in self.shards:
            if s.id == shard_id:
                return s
        raise MetadataUnavailable(f"shard {shard_id} is gone from the shard map")

    def shard_metadata(self, shard_id: int) -> tuple[tuple[str, str], ...]:
        return self.metadata + ((cv.SHARD_HEADER, str(shard_id)),)

    async def retry(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run an idempotent call, retrying transient failures with backoff."""
        deadline = time.monotonic() + self.retry_timeout
        backoff = Backoff()
        while True:
            if self.closed:
                raise MetadataClosed("metadata client is closed")
            try:
                return await fn()
            except grpc.RpcError as e:
                if e.code() not in RETRYABLE or time.monotonic() >= deadline:
                    raise error_from_rpc(e) from None
                log.debug("retrying after %s", e.code().name)
            await backoff.wait()

    async def close(self) -> None:
        self.closed = True
        if self._follower is not None:
            self._follower.cancel()
            await asyncio.gather(self._follower, return_exceptions=True)
        for ch, _ in self._channels.values():
            await ch.close()
        self._channels.clear()
