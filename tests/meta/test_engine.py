"""Embedded-engine specifics: group commit, restart, namespaces, overflow."""

from __future__ import annotations

import asyncio
import os

import pytest

from nereus.meta import EXPECT_ABSENT, InvalidRequest, UnexpectedVersion, open_engine
from nereus.meta.embedded import Engine, ManualClock, NotificationsOverflow


async def test_group_commit_batches(tmp_path):
    async with open_engine(str(tmp_path), shards=1) as engine:
        c = engine.client()
        shard = engine.namespace().shards[0]
        await c.put("/warm", b"")
        before = shard.batches
        await c.put("/taken", b"")
        # 300 concurrent conditional puts, some doomed to fail: they are queued while
        # the first batch is being written and go out in a handful of transactions.
        ops = [c.put(f"/gc/{i}", b"v", expected_version_id=EXPECT_ABSENT) for i in range(300)]
        ops += [c.put("/taken", b"", expected_version_id=EXPECT_ABSENT) for _ in range(10)]
        results = await asyncio.gather(*ops, return_exceptions=True)
        assert all(not isinstance(r, Exception) for r in results[:300])
        assert all(isinstance(r, UnexpectedVersion) for r in results[300:])
        batches = shard.batches - before - 1
        assert 1 <= batches <= 5, batches
        assert shard.ops >= 312


async def test_restart_keeps_data_and_versions_increasing(tmp_path):
    d = str(tmp_path)
    async with open_engine(d) as engine:
        c = engine.client()
        r1 = await c.put("/r/a", b"1", partition_key="p")
        await c.put("/r/b", b"1")
    async with open_engine(d) as engine:
        c = engine.client()
        assert (await c.get("/r/a", partition_key="p")).version == r1.version
        assert (await c.get("/r/b")).value == b"1"
        r2 = await c.put("/r/a", b"2", partition_key="p", expected_version_id=r1.version.version_id)
        assert r2.version.version_id > r1.version.version_id
        assert r2.version.modifications_count == 1
        r3 = await c.put("/r/new", b"2", partition_key="p")
        assert r3.version.version_id > r2.version.version_id


async def test_sessions_expire_after_restart(tmp_path):
    d = str(tmp_path)
    engine = Engine(d, clock=ManualClock())
    c = engine.client(session_timeout=5)
    await c.put("/eph/a", b"x", ephemeral=True)
    await c.put("/eph/b", b"x", ephemeral=True, partition_key="zz")
    await engine.close()  # "crash": the client never closed its session
    clock = ManualClock()
    async with Engine(d, clock=clock, sweep_interval=3600) as engine:  # we sweep by hand
        c = engine.client()
        # Both shards opened (and gave the sessions a fresh timeout) before time moves.
        assert await c.get("/eph/a") is not None
        assert await c.get("/eph/b", partition_key="zz") is not None
        clock.advance(4)
        assert await engine.expire_sessions() == 0
        clock.advance(2)
        assert await engine.expire_sessions() == 2  # one per shard it touched
        assert await c.get("/eph/a") is None
        assert await c.get("/eph/b", partition_key="zz") is None


async def test_sweeper_thread_expires_sessions():
    clock = ManualClock()
    async with Engine(None, clock=clock, sweep_interval=0.02) as engine:
        owner, other = engine.client(session_timeout=1), engine.client()
        await owner.put("/sw", b"", ephemeral=True)
        owner._pause_heartbeats()
        clock.advance(2)
        for _ in range(200):
            if await other.get("/sw") is None:
                break
            await asyncio.sleep(0.01)
        assert await other.get("/sw") is None


async def test_namespaces_are_separate(tmp_path):
    d = str(tmp_path)
    async with open_engine(d, shards=3, namespaces={"big": 5}) as engine:
        a, b = engine.client(), engine.client("big")
        await a.put("/k", b"default")
        await b.put("/k", b"big")
        c = engine.client("made-on-demand")
        assert await c.get("/k") is None
        assert len(engine.namespace("big").shards) == 5
        assert len(engine.namespace().shards) == 3
    async with open_engine(d, shards=8) as engine:  # existing namespaces keep their count
        assert len(engine.namespace().shards) == 3
        assert (await engine.client("big").get("/k")).value == b"big"
        assert len(engine.namespace("brand-new").shards) == 8


async def test_data_dir_is_locked(tmp_path):
    async with open_engine(str(tmp_path)):
        with pytest.raises(RuntimeError):
            open_engine(str(tmp_path))


async def test_memory_mode_cleans_up():
    engine = open_engine(None)
    path = engine.data_dir
    await engine.client().put("/m", b"")
    await engine.close()
    assert not os.path.exists(path)


async def test_slow_subscriber_overflows_without_blocking_writes():
    async with Engine(None, notification_queue=50) as engine:
        c = engine.client()
        stream = c.notifications()
        await asyncio.gather(*(c.put(f"/o/{i}", b"") for i in range(200)))  # nobody reads
        with pytest.raises(NotificationsOverflow):
            async for _ in stream:
                pass
        fresh = c.notifications()
        await c.put("/o/after", b"")
        async for n in fresh:
            assert n.key == "/o/after"
            break


async def test_failed_batch_does_not_ack(tmp_path, monkeypatch):
    from nereus.meta import MetadataUnavailable

    async with open_engine(str(tmp_path), shards=1) as engine:
        c = engine.client()
        store = None
        for _ in range(100):
            store = engine.namespace().shards[0]._store
            if store is not None:
                break
            await asyncio.sleep(0.01)

        def boom(ops, notes):
            raise OSError("disk on fire")

        monkeypatch.setattr(store, "execute", boom)
        with pytest.raises(MetadataUnavailable):
            await c.put("/f", b"")
        monkeypatch.undo()
        await c.put("/f", b"ok")
        assert (await c.get("/f")).value == b"ok"


async def test_map_grows_and_reopens(tmp_path):
    d = str(tmp_path)
    value = b"v" * 2000
    async with Engine(d, shards=1, map_size=1 << 20) as engine:  # 1 MiB: must grow
        c = engine.client()
        await asyncio.gather(*(c.put(f"/big/{i}", value) for i in range(3000)))
    async with Engine(d, shards=1, map_size=1 << 20) as engine:
        c = engine.client()
        keys = [k async for k in c.list("/big/", "/big/~")]
        assert len(keys) == 3000
        assert (await c.get("/big/2999")).value == value
        await c.put("/big/more", value)


async def test_connect_urls(tmp_path):
    from nereus.meta import connect

    async with connect(f"embedded://{tmp_path}/m") as c:
        await c.put("/u", b"1")
    async with connect(f"embedded://{tmp_path}/m") as c:  # the engine was closed with it
        assert (await c.get("/u")).value == b"1"
    async with connect("embedded://") as c:
        assert await c.get("/u") is None
    async with open_engine(None) as engine:
        c = connect("embedded", engine=engine, identity="me")
        await c.put("/e", b"", ephemeral=True)
        await c.close()
        assert not engine.closed
    from nereus.meta.oxia.client import OxiaMetadataStore

    oc = connect("oxia://localhost:6648/tenant-a")  # connects lazily, on first use
    assert isinstance(oc, OxiaMetadataStore) and oc.namespace == "tenant-a"
    await oc.close()
    with pytest.raises(InvalidRequest):
        connect("oxia:localhost")
