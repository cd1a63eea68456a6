"""Batched reads: the gets of one shard asked for in the same turn of the event loop share one Read call.

Oxia's Read takes many gets and answers them in order (over one or more response
messages), as its own clients batch them. One gRPC call costs far more here than a get
on the server, so a broker answering for many topics at once (a Kafka Metadata answer,
a lookup storm after a failover) makes a few calls instead of one per key.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from ..errors import MetadataUnavailable
from ._conn import Connection, ShardInfo
from .proto import client_pb2 as pb

MAX_GETS_PER_CALL = 1000  # a bigger batch waits for the next call (keeps a message well under gRPC's size limit)


class ShardReads:
    """Collects gets per shard and sends each shard's in one ``Read`` call, after the current loop turn."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._pending: dict[ShardInfo, list[tuple[pb.GetRequest, asyncio.Future]]] = {}

    def submit(self, shard: ShardInfo, req: pb.GetRequest) -> asyncio.Future:
        """A future of the ``GetResponse`` for ``req`` on ``shard``."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        waiting = self._pending.get(shard)
        if waiting is None:
            waiting = self._pending[shard] = []
            loop.call_soon(self._flush, shard)
        waiting.append((req, future))
        return future

    def _flush(self, shard: ShardInfo) -> None:
        waiting = self._pending.pop(shard, [])
        for start in range(0, len(waiting), MAX_GETS_PER_CALL):
            asyncio.ensure_future(self._send(shard, waiting[start:start + MAX_GETS_PER_CALL]))

    async def _send(self, shard: ShardInfo, batch: list[tuple[pb.GetRequest, asyncio.Future]]) -> None:
        batch = [(req, future) for req, future in batch if not future.done()]  # cancelled meanwhile
        if not batch:
            return
        try:
            answers = await self._conn.retry(lambda: self._call(shard, [req for req, _ in batch]))
        except BaseException as exc:  # every get of the call fails as it did
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), answer in zip(batch, answers):
            if not future.done():
                future.set_result(answer)

    async def _call(self, shard: ShardInfo, gets: list[pb.GetRequest]) -> list[Any]:
        stream = self._conn.stub(shard.leader).Read(pb.ReadRequest(shard=shard.id, gets=gets),
                                                    metadata=self._conn.shard_metadata(shard.id))
        answers: list[Any] = []
        while len(answers) < len(gets):
            resp = await stream.read()
            if resp is grpc.aio.EOF:
                raise MetadataUnavailable(f"the read of {len(gets)} key(s) ended after {len(answers)} answer(s)")
            answers.extend(resp.gets)
        return answers


__all__ = ["MAX_GETS_PER_CALL", "ShardReads"]
