"""The ObjectStore contract, run against every backend (see the ``store`` fixture)."""

from __future__ import annotations

import array
import asyncio
import os

import pytest

from nereus.objstore import (
    InvalidObjectKey,
    InvalidRange,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
)

DATA = b"0123456789A"  # 11 bytes


async def test_roundtrip(store: ObjectStore) -> None:
    await store.put_if_absent("seg/0001", DATA)
    got = await store.get("seg/0001")
    assert got == DATA and type(got) is bytes
    assert await store.head("seg/0001") == ObjectInfo("seg/0001", len(DATA))


async def test_empty_object(store: ObjectStore) -> None:
    await store.put_if_absent("empty", b"")
    assert await store.get("empty") == b""
    assert await store.get("empty", 0, 10) == b""
    assert await store.get("empty", 3) == b""
    assert (await store.head("empty")).size == 0


@pytest.mark.parametrize(
    "data",
    [
        [b"ab", b"", b"cd", b"efg"],
        (b"x" * 1000, memoryview(b"y" * 10), bytearray(b"z" * 3)),
        [memoryview(b"0123456789")[2:7]],
        [array.array("I", [1, 2, 3])],  # typed buffers are stored as their raw bytes
        [],
    ],
    ids=["bytes-chunks", "mixed-buffers", "sliced-view", "typed-array", "no-chunks"],
)
async def test_put_chunks(store: ObjectStore, data) -> None:
    await store.put_if_absent("chunks", data)
    assert await store.get("chunks") == b"".join(bytes(memoryview(c).cast("B")) for c in data)


async def test_put_memoryview_and_bytearray(store: ObjectStore) -> None:
    await store.put_if_absent("mv", memoryview(DATA)[1:4])
    assert await store.get("mv") == b"123"
    buf = bytearray(DATA)
    await store.put_if_absent("ba", buf)
    buf[:] = b"X" * len(buf)  # the store must not keep a reference to the caller's buffer
    assert await store.get("ba") == DATA


@pytest.mark.parametrize(
    "start,end",
    [(0, 3), (3, None), (2, 5), (0, None), (0, 11), (10, 11), (5, 5), (0, 0), (11, 11),
     (9, 20), (0, 1000), (11, None), (11, 15), (50, 60), (50, None)],
)
async def test_ranged_get(store: ObjectStore, start: int, end: int | None) -> None:
    await store.put_if_absent("r", DATA)
    # Python slicing clips exactly like the contract says ranges are clipped.
    assert await store.get("r", start, end) == DATA[start:end]


@pytest.mark.parametrize("start,end", [(-1, None), (-1, 5), (5, 4), (0, -1)])
async def test_invalid_range(store: ObjectStore, start: int, end: int | None) -> None:
    await store.put_if_absent("r", DATA)
    with pytest.raises(InvalidRange):
        await store.get("r", start, end)


@pytest.mark.parametrize("start,end", [(0, None), (0, 0), (3, 9), (4, None)])
async def test_missing_key(store: ObjectStore, start: int, end: int | None) -> None:
    with pytest.raises(ObjectNotFound):
        await store.get("nope/missing", start, end)
    with pytest.raises(ObjectNotFound):
        await store.head("nope/missing")


async def test_delete(store: ObjectStore) -> None:
    await store.put_if_absent("d/x", DATA)
    assert await store.delete("d/x") is True
    with pytest.raises(ObjectNotFound):
        await store.head("d/x")
    with pytest.raises(ObjectNotFound):
        await store.get("d/x")
    assert await store.delete("d/x") is False
    assert await store.delete("never/existed") is False
    # The name is free again once deleted.
    await store.put_if_absent("d/x", b"again")
    assert await store.get("d/x") == b"again"


async def test_put_if_absent_refuses_existing(store: ObjectStore) -> None:
    await store.put_if_absent("k", b"first")
    with pytest.raises(ObjectExists):
        await store.put_if_absent("k", b"second, longer than the first")
    with pytest.raises(ObjectExists):
        await store.put_if_absent("k", [b"as", b"chunks"])
    assert await store.get("k") == b"first"
    assert (await store.head("k")).size == 5


async def test_concurrent_put_if_absent_one_winner(store: ObjectStore) -> None:
    async def attempt(i: int) -> int | None:
        try:
            await store.put_if_absent("contended/key", b"writer-%02d" % i * 100)
        except ObjectExists:
            return None
        return i

    results = await asyncio.gather(*(attempt(i) for i in range(16)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert await store.get("contended/key") == b"writer-%02d" % winners[0] * 100


async def test_concurrent_distinct_keys(store: ObjectStore) -> None:
    keys = [f"many/{i % 4}/obj-{i}" for i in range(24)]
    await asyncio.gather(*(store.put_if_absent(k, k.encode()) for k in keys))
    assert await asyncio.gather(*(store.get(k) for k in keys)) == [k.encode() for k in keys]


INVALID_KEYS = [
    "", "/abs", "a//b", "a/", "../x", "a/../b", "./a", "a/./b", "..", ".",
    "a\\b", "a\x00b", ".tmp-x", "d/.tmp-123-abc", "x" * 1025,
]


@pytest.mark.parametrize("key", INVALID_KEYS, ids=repr)
async def test_invalid_keys(store: ObjectStore, key: str) -> None:
    with pytest.raises(InvalidObjectKey):
        await store.put_if_absent(key, DATA)
    with pytest.raises(InvalidObjectKey):
        await store.get(key)
    with pytest.raises(InvalidObjectKey):
        await store.head(key)
    with pytest.raises(InvalidObjectKey):
        await store.delete(key)


@pytest.mark.parametrize("key", ["a b/ü-ñ/x=1,y;z.seg", "deep/a/b/c/d/e/f/g", "dots.in..name", ".hidden", "x" * 200])
async def test_unusual_valid_keys(store: ObjectStore, key: str) -> None:
    await store.put_if_absent(key, key.encode())
    assert await store.get(key) == key.encode()
    assert await store.delete(key) is True


async def test_large_object(store: ObjectStore) -> None:
    data = os.urandom(8 * 1024 * 1024)
    await store.put_if_absent("big", [memoryview(data)[: 3 << 20], memoryview(data)[3 << 20 :]])
    assert (await store.head("big")).size == len(data)
    assert await store.get("big") == data
    assert await store.get("big", 5_000_000, 5_000_100) == data[5_000_000:5_000_100]
    assert await store.get("big", len(data) - 7) == data[-7:]


async def test_closed_store_refuses_work(store: ObjectStore) -> None:
    await store.put_if_absent("k", DATA)
    await store.close()
    with pytest.raises(ObjectStoreError):
        await store.get("k")
    with pytest.raises(ObjectStoreError):
        await store.put_if_absent("k2", DATA)
    await store.close()  # idempotent
