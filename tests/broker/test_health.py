"""The broker's health check writes and reads back through its storage (as Pulsar's produces and consumes)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from nereus.broker.admin import health
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.objstore.faults import FaultInjectingObjectStore
from nereus.storage import StreamStorage


@pytest.fixture
async def objects():
    store = FaultInjectingObjectStore(open_object_store("memory://"))
    yield store
    await store.close()


@pytest.fixture
async def storage(objects):
    engine = open_engine(None, shards=1)
    meta = engine.client(namespace="default")
    storage = StreamStorage(meta, objects, node_id="b0")
    yield storage
    await storage.close()
    await meta.close()
    await engine.close()


def _ctx(storage) -> SimpleNamespace:
    return SimpleNamespace(storage=storage, placement=SimpleNamespace(local=SimpleNamespace(name="b0")))


async def test_a_healthy_broker_writes_reads_back_and_keeps_one_record(storage):
    ctx, handles = _ctx(storage), {}
    for _ in range(3):
        await health.check(ctx, handles)
    stream = await storage.open_stream("internal://health/b0")
    result = await stream.fetch(2)
    assert [e.base_offset for e in result.entries] == [2] and result.start_offset == 2  # trimmed to the last
    assert "internal://health/b0" in await storage.list_streams()


async def test_a_broker_that_cannot_store_data_is_not_healthy(storage, objects):
    ctx, handles = _ctx(storage), {}
    await health.check(ctx, handles)
    objects.fail_puts(lambda _key: True)
    with pytest.raises(Exception):
        async with asyncio.timeout(10):
            await health.check(ctx, handles)
