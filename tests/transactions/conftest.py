"""A broker's transaction parts over the embedded metadata engine and in-memory objects."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import pytest

from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import StreamStorage
from nereus.topics import TopicRegistry
from nereus.transactions import (BrokerParticipants, ProducerIds, StreamTransactions, TransactionCoordinator)


class Clock:
    """A settable clock (seconds), for timeouts without waiting."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Broker:
    meta: object
    storage: StreamStorage
    registry: TopicRegistry
    stream_txns: StreamTransactions
    participants: BrokerParticipants
    coordinator: TransactionCoordinator
    clock: Clock

    def new_coordinator(self) -> TransactionCoordinator:
        """Another coordinator over the same metadata (a restarted or a second broker)."""
        return TransactionCoordinator(self.meta, ProducerIds(self.meta), self.participants, clock=self.clock,
                                      stream_txns=self.stream_txns)


@contextlib.asynccontextmanager
async def broker_parts(objects_url: str = "memory://"):
    """A ``Broker`` over the embedded metadata engine and the object store at ``objects_url``."""
    engine = open_engine(None, shards=2)
    meta = engine.client(namespace="default")
    objects = open_object_store(objects_url)
    storage = StreamStorage(meta, objects, node_id="n")
    registry = TopicRegistry(storage, meta, idle_seconds=60)
    stream_txns = StreamTransactions(meta)
    registry.key_compactor.stable_end = stream_txns.read_view
    clock = Clock()
    participants = BrokerParticipants(registry, stream_txns, clock=clock)
    coordinator = TransactionCoordinator(meta, ProducerIds(meta), participants, clock=clock, stream_txns=stream_txns)
    try:
        yield Broker(meta, storage, registry, stream_txns, participants, coordinator, clock)
    finally:
        await coordinator.close()
        await stream_txns.close()
        await registry.close()
        await storage.close()
        await meta.close()
        await engine.close()


@pytest.fixture
async def broker():
    async with broker_parts() as parts:
        yield parts
