"""Secondary indexes through the MetadataStore API, on every backend of conftest.BACKENDS."""

from __future__ import annotations

import pytest

from nereus.meta import Comparison, InvalidRequest, PutOp
from nereus.meta.keys import shard_index

EQ, FLOOR, CEIL, LOWER, HIGHER = (
    Comparison.EQUAL, Comparison.FLOOR, Comparison.CEILING, Comparison.LOWER, Comparison.HIGHER)


async def collect(it):
    return [x async for x in it]


async def test_index_order_across_shards_and_pages(store):
    # Primary keys sort against their secondary keys, and spread over the shards:
    # the client merges the shards in index order (secondary key, then primary key).
    keys = [f"/u/{i:02d}" for i in range(10)]
    assert len({shard_index(k, 4) for k in keys}) > 1
    for i, k in enumerate(keys):
        await store.put(k, f"v{i}".encode(), secondary_indexes={"rank": f"r{9 - i}", "group": f"g{i % 3}"})
    expect = list(reversed(keys))
    for page_size in (1, 3, 1000):
        assert await collect(store.list("r", "s", use_index="rank", page_size=page_size)) == expect
    recs = await collect(store.range_scan("r2", "r5", use_index="rank", page_size=2))
    assert [(r.key, r.value) for r in recs] == [(keys[7], b"v7"), (keys[6], b"v6"), (keys[5], b"v5")]
    # Several records under one secondary key: by primary key.
    assert await collect(store.list("g1", "g2", use_index="group")) == [keys[1], keys[4], keys[7]]

    async def get(key, cmp=EQ):
        rec = await store.get(key, comparison=cmp, use_index="group")
        return rec and rec.key

    assert await get("g1") == keys[1]
    assert await get("g1", FLOOR) == keys[1]
    assert await get("g15", FLOOR) == keys[7]  # the last entry of the nearest lower key
    assert await get("g1", LOWER) == keys[9]
    assert await get("g05", CEIL) == keys[1]
    assert await get("g1", HIGHER) == keys[2]
    assert await get("g2", HIGHER) is None
    assert await get("g0", LOWER) is None
    assert (await store.get("r0", use_index="rank", include_value=False)).value is None


async def test_index_entries_follow_their_record(store):
    await store.put("/a", b"1", secondary_indexes=[("tag", "x"), ("tag", "y")])  # two entries in one index
    await store.put("/b", b"2", secondary_indexes={"tag": "y"})
    assert await collect(store.list("a", "z", use_index="tag")) == ["/a", "/a", "/b"]
    await store.put("/a", b"1b", secondary_indexes={"tag": "z"})
    assert await collect(store.list("a", "zz", use_index="tag")) == ["/b", "/a"]
    assert await store.get("x", use_index="tag") is None
    await store.put("/a", b"1c")
    assert await collect(store.list("a", "zz", use_index="tag")) == ["/b"]
    await store.delete("/b")
    assert await collect(store.list("a", "zz", use_index="tag")) == []
    res = await store.put_many([PutOp(f"/c/{i}", b"", secondary_indexes={"tag": f"c{i}"}) for i in range(3)])
    assert all(not isinstance(r, Exception) for r in res)
    assert await collect(store.list("c", "d", use_index="tag")) == ["/c/0", "/c/1", "/c/2"]
    await store.delete_range("/c/", "/c/1")
    assert await collect(store.list("c", "d", use_index="tag")) == ["/c/1", "/c/2"]
    eph = await store.put("/e", b"", ephemeral=True, secondary_indexes={"tag": "e"})
    assert (await store.get("e", use_index="tag")).version.session_id == eph.version.session_id


async def test_index_bad_input(store):
    for bad in ({"": "x"}, {"a\x00": "x"}, {"i": "\x00"}, {"i": 3}, [("i",)], {"i": "s" * 600}):
        with pytest.raises(InvalidRequest):
            await store.put("/k", b"", secondary_indexes=bad)
    assert await store.get("/k") is None
    with pytest.raises(InvalidRequest):
        await store.get("x", use_index="")
    with pytest.raises(InvalidRequest):
        await collect(store.list("a", "b", use_index=""))


def test_oxia_client_session_timeout_bounds():
    from nereus.meta.oxia.client import OxiaMetadataStore

    for bad in (1.999, 300.5):
        with pytest.raises(InvalidRequest, match="2 s to 300 s"):
            OxiaMetadataStore("127.0.0.1:1", session_timeout=bad)
