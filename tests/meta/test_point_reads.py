"""Point reads of the embedded engine: answered from committed state, never queued behind a batch."""

from __future__ import annotations

import asyncio
import threading

from nereus.meta import open_engine
from nereus.meta.api import Comparison


def _hold_batches(shard) -> tuple[threading.Event, threading.Event]:
    """Make the shard thread stop inside its next batch, before the commit, until released."""
    inside, release = threading.Event(), threading.Event()
    store = shard._store
    execute = store.execute

    def held(ops, notes):
        inside.set()
        release.wait(30)
        return execute(ops, notes)

    store.execute = held
    return inside, release


async def test_a_get_is_answered_while_a_batch_ahead_of_it_commits_and_sees_only_committed_writes(tmp_path):
    async with open_engine(str(tmp_path), shards=1) as engine:
        client = engine.client()
        await client.put("/a", b"old")
        await client.put("/b", b"b")
        shard = engine.namespace().shards[0]
        inside, release = _hold_batches(shard)
        try:
            write = asyncio.ensure_future(client.put("/a", b"new"))
            assert await asyncio.to_thread(inside.wait, 30)
            # The write is in the shard thread, not committed: gets do not wait for it, and
            # see the state before it (it is not acknowledged: it comes after them).
            assert (await asyncio.wait_for(client.get("/a"), 5)).value == b"old"
            assert (await asyncio.wait_for(client.get("/b"), 5)).value == b"b"
            many = await asyncio.wait_for(client.get_many(["/a", "/b", "/c"]), 5)
            assert [r.value if r else None for r in many] == [b"old", b"b", None]
            assert not write.done()
        finally:
            release.set()
        written = await write
        got = await client.get("/a")  # asked after the acknowledgement: sees the write
        assert got.value == b"new" and got.version.version_id == written.version.version_id


async def test_reads_stay_right_while_writes_grow_the_map(tmp_path):
    # A small map: the writes below grow it several times, with reads running between them.
    async with open_engine(str(tmp_path), shards=1, map_size=256 << 10) as engine:
        client = engine.client()
        value = b"v" * 2000
        stop = False

        async def reader() -> int:
            reads = 0
            while not stop:
                got = await client.get("/grow/000000")
                assert got is None or got.value == value
                floor = await client.get("/grow/999999", comparison=Comparison.FLOOR)
                assert floor is None or floor.value == value
                reads += 1
                await asyncio.sleep(0)
            return reads

        readers = [asyncio.ensure_future(reader()) for _ in range(4)]
        for start in range(0, 2000, 100):
            await asyncio.gather(*(client.put(f"/grow/{i:06d}", value) for i in range(start, start + 100)))
        stop = True
        assert all(n > 0 for n in await asyncio.gather(*readers))
        got = await client.get_many([f"/grow/{i:06d}" for i in range(2000)])
        assert all(r is not None and r.value == value for r in got)
        # 2,000 records of 2 KB: the 256 KiB map had to grow while the readers ran.
        assert engine.namespace().shards[0]._store.env.info()["map_size"] > 256 << 10


async def test_a_closed_engine_refuses_reads(tmp_path):
    engine = open_engine(str(tmp_path), shards=1)
    client = engine.client()
    await client.put("/x", b"x")
    assert (await client.get("/x")).value == b"x"
    await engine.close()
    try:
        await client.get("/x")
    except Exception as exc:  # noqa: BLE001 - the type is what the client says on a closed engine
        assert "closed" in str(exc).lower()
    else:
        raise AssertionError("a read of a closed engine answered")
