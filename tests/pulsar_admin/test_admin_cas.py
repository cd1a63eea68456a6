"""Admin updates of tenants and namespace policies are compare-and-sets on the version read.

The admin app runs over an embedded metadata engine whose client lets a test write
behind the handler's back between its read and its write (as another broker would).
"""

import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nereus.broker import admin
from nereus.broker.admin.common import CONTEXT, UPDATE_ATTEMPTS, tenant_key
from nereus.meta import open_engine
from nereus.pulsar.server.schemas import policies_key


class Interloper:
    """A metadata client that runs ``before_put(key)`` ahead of each conditional put of ``key``."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.before_put = None
        self.conditional_puts = 0

    async def put(self, key, value, **kwargs):
        if kwargs.get("expected_version_id") is not None:
            self.conditional_puts += 1
            if self.before_put is not None:
                await self.before_put(key)
        return await self.inner.put(key, value, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.fixture
async def setup():
    engine = open_engine(None, shards=4)
    broker, other = engine.client(namespace="default"), engine.client(namespace="default")
    meta = Interloper(broker)
    app = web.Application()
    admin.register(app)
    ctx = app[CONTEXT]
    ctx.meta, ctx.pulsar = meta, object()  # no Pulsar topics are touched by these paths
    client = TestClient(TestServer(app))
    await client.start_server()
    assert (await client.put("/admin/v2/tenants/t", json={})).status == 204
    assert (await client.put("/admin/v2/namespaces/t/ns", json={})).status == 204
    yield client, meta, other
    await client.close()
    await broker.close()
    await other.close()
    await engine.close()


async def test_creating_what_exists_answers_409(setup):
    client, _, _ = setup
    assert (await client.put("/admin/v2/tenants/t", json={})).status == 409
    assert (await client.put("/admin/v2/namespaces/t/ns", json={})).status == 409


async def test_a_tenant_deleted_during_an_update_is_not_recreated(setup):
    client, meta, other = setup

    async def delete_it(key):
        if key == tenant_key("t"):
            await other.delete(key)
    meta.before_put = delete_it
    resp = await client.post("/admin/v2/tenants/t", json={"adminRoles": ["ops"]})
    assert resp.status == 404
    assert await other.get(tenant_key("t")) is None


async def test_a_policy_update_that_lost_a_race_is_redone_on_the_new_record(setup):
    client, meta, other = setup

    async def set_dedup_once(key):
        meta.before_put = None
        stored = json.loads((await other.get(key)).value)
        await other.put(key, json.dumps({**stored, "deduplicationEnabled": False}).encode())
    meta.before_put = set_dedup_once
    resp = await client.put("/admin/v2/namespaces/t/ns/schemaCompatibilityStrategy", json="FULL")
    assert resp.status == 204
    stored = json.loads((await other.get(policies_key("t", "ns"))).value)
    assert stored == {"deduplicationEnabled": False, "schema_compatibility_strategy": "FULL"}  # both kept


async def test_an_update_that_keeps_losing_answers_409(setup):
    client, meta, other = setup
    counter = iter(range(1000))

    async def always_write(key):
        stored = json.loads((await other.get(key)).value)
        await other.put(key, json.dumps({**stored, "n": next(counter)}).encode())
    meta.before_put, meta.conditional_puts = always_write, 0
    resp = await client.put("/admin/v2/namespaces/t/ns/schemaCompatibilityStrategy", json="FULL")
    assert resp.status == 409
    assert meta.conditional_puts == UPDATE_ATTEMPTS
    assert (await client.post("/admin/v2/tenants/t", json={})).status == 409
