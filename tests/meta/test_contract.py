"""The MetadataStore contract: every backend in conftest.BACKENDS must pass this."""

from __future__ import annotations

import asyncio
import functools

import pytest

from nereus.meta import (
    EXPECT_ABSENT,
    Comparison,
    InvalidRequest,
    MetadataClosed,
    NotificationType,
    UnexpectedVersion,
    update,
)
from nereus.meta.cas import ReadAgain, retry
from nereus.meta.keys import compare_keys

EQ, FLOOR, CEIL, LOWER, HIGHER = (
    Comparison.EQUAL, Comparison.FLOOR, Comparison.CEILING, Comparison.LOWER, Comparison.HIGHER)
oxia_sorted = functools.partial(sorted, key=functools.cmp_to_key(compare_keys))


async def collect(it):
    return [x async for x in it]


async def next_notes(stream, n, timeout=5.0):
    it = stream.__aiter__()
    return [await asyncio.wait_for(it.__anext__(), timeout) for _ in range(n)]


# ------------------------------------------------------------------ put / get
async def test_put_get_versions(store, backend):
    r1 = await store.put("/v/a", b"one")
    assert r1.key == "/v/a"
    v1 = r1.version
    assert v1.modifications_count == 0
    assert v1.created_timestamp == v1.modified_timestamp > 0
    assert v1.session_id is None and v1.client_identity is None
    rec = await store.get("/v/a")
    assert rec.key == "/v/a" and rec.value == b"one" and rec.version == v1
    await backend.advance_time(2)
    r2 = await store.put("/v/a", b"two")
    assert r2.version.version_id > v1.version_id
    assert r2.version.modifications_count == 1
    assert r2.version.created_timestamp == v1.created_timestamp
    assert r2.version.modified_timestamp >= v1.modified_timestamp
    r3 = await store.put("/v/a", b"three")
    assert r3.version.modifications_count == 2
    assert (await store.get("/v/a")).value == b"three"
    assert (await store.get("/v/a", include_value=False)).value is None
    assert await store.get("/v/missing") is None
    assert (await store.put("/v/empty", b"")).version.modifications_count == 0
    assert (await store.get("/v/empty")).value == b""


async def test_version_ids_increase_per_shard(store):
    # Version ids are per shard (as Oxia's): one partition key = one shard.
    vids = [(await store.put(f"/u/{i % 7}", b"x", partition_key="u")).version.version_id
            for i in range(30)]
    assert vids == sorted(vids) and len(set(vids)) == 30


async def test_cas(store):
    r = await store.put("/cas", b"a", expected_version_id=EXPECT_ABSENT)
    with pytest.raises(UnexpectedVersion):
        await store.put("/cas", b"b", expected_version_id=EXPECT_ABSENT)
    with pytest.raises(UnexpectedVersion):
        await store.put("/cas", b"b", expected_version_id=r.version.version_id + 1000)
    r2 = await store.put("/cas", b"b", expected_version_id=r.version.version_id)
    with pytest.raises(UnexpectedVersion):  # the old version is stale now
        await store.put("/cas", b"c", expected_version_id=r.version.version_id)
    assert (await store.get("/cas")).value == b"b"
    with pytest.raises(UnexpectedVersion):  # a version on an absent key
        await store.put("/cas-absent", b"x", expected_version_id=r2.version.version_id)
    assert await store.get("/cas-absent") is None


async def test_delete(store):
    assert await store.delete("/d/none") is False
    assert await store.delete("/d/none", expected_version_id=EXPECT_ABSENT) is False
    with pytest.raises(UnexpectedVersion):
        await store.delete("/d/none", expected_version_id=5)
    r = await store.put("/d/a", b"x")
    with pytest.raises(UnexpectedVersion):
        await store.delete("/d/a", expected_version_id=r.version.version_id + 1)
    with pytest.raises(UnexpectedVersion):
        await store.delete("/d/a", expected_version_id=EXPECT_ABSENT)
    assert await store.delete("/d/a", expected_version_id=r.version.version_id) is True
    assert await store.get("/d/a") is None
    r = await store.put("/d/a", b"again")  # re-created: a new record
    assert r.version.modifications_count == 0
    assert await store.delete("/d/a") is True


# ------------------------------------------------------------- comparisons
async def _check_comparisons(store, pk):
    for k in ("/c/b", "/c/d", "/c/f"):
        await store.put(k, k.encode(), partition_key=pk)

    async def g(key, cmp):
        r = await store.get(key, comparison=cmp, partition_key=pk)
        return None if r is None else r.key

    assert await g("/c/d", EQ) == "/c/d"
    assert await g("/c/c", EQ) is None
    assert [await g("/c/d", c) for c in (FLOOR, CEIL, LOWER, HIGHER)] == ["/c/d", "/c/d", "/c/b", "/c/f"]
    assert [await g("/c/c", c) for c in (FLOOR, CEIL, LOWER, HIGHER)] == ["/c/b", "/c/d", "/c/b", "/c/d"]
    assert [await g("/c/a", c) for c in (FLOOR, CEIL, LOWER, HIGHER)] == [None, "/c/b", None, "/c/b"]
    assert [await g("/c/g", c) for c in (FLOOR, CEIL, LOWER, HIGHER)] == ["/c/f", None, "/c/f", None]
    assert [await g("/c/b", c) for c in (LOWER, FLOOR)] == [None, "/c/b"]
    assert [await g("/c/f", c) for c in (HIGHER, CEIL)] == [None, "/c/f"]
    rec = await store.get("/c/e", comparison=CEIL, partition_key=pk)
    assert rec.value == b"/c/f"


async def test_comparisons_partitioned(store):
    await _check_comparisons(store, "part-1")


async def test_comparisons_across_shards(store):
    await _check_comparisons(store, None)


async def test_comparisons_empty_and_many_shards(store):
    for c in (EQ, FLOOR, CEIL, LOWER, HIGHER):
        assert await store.get("/x", comparison=c) is None
    keys = [f"/n/{i:04d}" for i in range(0, 200, 2)]  # spread over every shard
    await asyncio.gather(*(store.put(k, b"") for k in keys))
    for i in range(1, 199, 14):
        assert (await store.get(f"/n/{i:04d}", comparison=CEIL)).key == f"/n/{i + 1:04d}"
        assert (await store.get(f"/n/{i:04d}", comparison=FLOOR)).key == f"/n/{i - 1:04d}"
        assert (await store.get(f"/n/{i - 1:04d}", comparison=HIGHER)).key == f"/n/{i + 1:04d}"
        assert (await store.get(f"/n/{i + 1:04d}", comparison=LOWER)).key == f"/n/{i - 1:04d}"


async def test_comparison_respects_slash_order(store):
    # "/a/z" sorts before "/a/b/c": children before grandchildren.
    await store.put("/a/b/c", b"", partition_key="p")
    await store.put("/a/z", b"", partition_key="p")
    assert (await store.get("/a/y", comparison=HIGHER, partition_key="p")).key == "/a/z"
    assert (await store.get("/a/zz", comparison=HIGHER, partition_key="p")).key == "/a/b/c"
    assert (await store.get("/a/b/c", comparison=LOWER, partition_key="p")).key == "/a/z"


# ------------------------------------------------------------ list / scan
KEYS = ["/", "/a", "/a/", "/a/b", "/a/b/c", "/a/b/c/d", "/a/bb", "/a/c", "/a/c/a", "/ab",
        "/b", "/b/a", "a", "a/b", "b", "/a/b/", "/a//b", "/é", "/a/z"]


async def test_list_order(store):
    await asyncio.gather(*(store.put(k, k.encode()) for k in KEYS))
    want = oxia_sorted(KEYS)
    assert await collect(store.list("", "\U0010ffff/\U0010ffff/\U0010ffff/\U0010ffff")) == want
    # A range selects what lies between the bounds in Oxia order.
    lo, hi = "/a/", "/a/b/c/d"
    sel = [k for k in want if compare_keys(lo, k) <= 0 and compare_keys(k, hi) < 0]
    assert await collect(store.list(lo, hi)) == sel
    scanned = await collect(store.range_scan(lo, hi))
    assert [r.key for r in scanned] == sel
    assert all(r.value == r.key.encode() for r in scanned)
    # Immediate children of /a/: from "/a/" to "/a//" covers one level only.
    assert await collect(store.list("/a/", "/a//")) == ["/a/", "/a/b", "/a/bb", "/a/c", "/a/z"]


async def test_paging(store):
    keys = [f"/p/{i:03d}" for i in range(37)]
    await asyncio.gather(*(store.put(k, b"v") for k in keys))
    pkeys = [f"/pp/{i:03d}" for i in range(37)]
    await asyncio.gather(*(store.put(k, b"v", partition_key="pp") for k in pkeys))
    for ps in (1, 5, 36, 37, 1000):
        assert await collect(store.list("/p/", "/p/~", page_size=ps)) == keys
        assert await collect(store.list("/pp/", "/pp/~", partition_key="pp", page_size=ps)) == pkeys
        recs = await collect(store.range_scan("/p/010", "/p/020", page_size=ps))
        assert [r.key for r in recs] == keys[10:20]
    assert await collect(store.list("/p/5", "/p/4")) == []


async def test_list_page_resumes_after_a_key(store):
    keys = [f"/lp/{i:03d}" for i in range(23)] + ["/lp/a%2F", "/lp/a%2Fb", "/lp/a~"]
    await asyncio.gather(*(store.put(k, b"v") for k in keys + ["/lp/010/deeper", "/lq"]))
    want = oxia_sorted(keys)
    for limit in (1, 4, 23, 100):
        seen, after = [], None
        while True:
            page = await store.list_page("/lp/", "/lp/\U0010ffff", start_after=after, limit=limit)
            assert len(page) <= limit
            seen += page
            if len(page) < limit:
                break
            after = page[-1]
        assert seen == want
    # A resume point below the range starts at its beginning; one past its end gives nothing.
    assert await store.list_page("/lp/005", "/lp/008", start_after="/lp/") == ["/lp/005", "/lp/006", "/lp/007"]
    assert await store.list_page("/lp/", "/lp/008", start_after="/lp/009") == []
    with pytest.raises(InvalidRequest):
        await store.list_page("/lp/", "/lp/~", limit=0)


async def test_partition_colocation(store):
    keys = [f"/col/{i}" for i in range(40)]
    await asyncio.gather(*(store.put(k, b"x", partition_key="tenant-7") for k in keys))
    assert await collect(store.list("/col/", "/col/~", partition_key="tenant-7")) == sorted(keys, key=functools.cmp_to_key(compare_keys))
    for k in keys[:5]:
        assert (await store.get(k, partition_key="tenant-7")).value == b"x"
    # A single shard holds them all, so ranges on another partition key's shard see
    # either all of them or none.
    for other in ("x", "y", "z", "w"):
        seen = await collect(store.list("/col/", "/col/~", partition_key=other))
        assert len(seen) in (0, 40)
    # A different partition key is a different (possibly the same) shard: deleting
    # with the right one works.
    assert await store.delete(keys[0], partition_key="tenant-7") is True


async def test_get_many_answers_each_key_in_order(store):
    # Keys of every shard, some absent, some under a partition key, more than one read call carries.
    keys = [f"/many/{i}" for i in range(2500)]
    await asyncio.gather(*(store.put(k, k.encode()) for k in keys[::2]))
    await store.put("/many/colocated", b"c", partition_key="p-1")
    asked = keys + ["/many/colocated", "/many/colocated"]
    routes = [None] * len(keys) + ["p-1", None]
    got = await store.get_many(asked, partition_keys=routes)
    assert len(got) == len(asked)
    for i, key in enumerate(keys):
        assert (got[i].value if got[i] is not None else None) == (key.encode() if i % 2 == 0 else None), key
    assert got[-2].value == b"c" and got[-2].key == "/many/colocated"
    assert (await store.get("/many/colocated")) == got[-1]  # routed by the key: the same answer as a get
    assert await store.get_many([]) == []
    with pytest.raises(InvalidRequest):
        await store.get_many(["/many/ok", "/bad\x00key"])


# ------------------------------------------------------------ sequence keys
async def test_sequence_keys(store):
    r1 = await store.put("/seq/a", b"1", partition_key="s", sequence_key_deltas=[1])
    assert r1.key == "/seq/a-%020d" % 1
    r2 = await store.put("/seq/a", b"2", partition_key="s", sequence_key_deltas=[5])
    assert r2.key == "/seq/a-%020d" % 6
    assert (await store.get(r2.key, partition_key="s")).value == b"2"
    r3 = await store.put("/seq/b", b"", partition_key="s", sequence_key_deltas=[2, 3])
    assert r3.key == "/seq/b-%020d-%020d" % (2, 3)
    r4 = await store.put("/seq/b", b"", partition_key="s", sequence_key_deltas=[1, 0, 7])
    assert r4.key == "/seq/b-%020d-%020d-%020d" % (3, 3, 7)
    with pytest.raises(InvalidRequest):  # fewer deltas than the sequence has parts
        await store.put("/seq/b", b"", partition_key="s", sequence_key_deltas=[1])
    results = await asyncio.gather(
        *(store.put("/seq/c", b"", partition_key="s", sequence_key_deltas=[1]) for _ in range(20)))
    assert sorted(r.key for r in results) == ["/seq/c-%020d" % i for i in range(1, 21)]
    with pytest.raises(InvalidRequest):
        await store.put("/seq/a", b"", sequence_key_deltas=[1])  # no partition key
    with pytest.raises(InvalidRequest):
        await store.put("/seq/a", b"", partition_key="s", sequence_key_deltas=[1], expected_version_id=1)
    with pytest.raises(InvalidRequest):
        await store.put("/seq/a", b"", partition_key="s", sequence_key_deltas=[0])
    with pytest.raises(InvalidRequest):
        await store.put("/seq/a", b"", partition_key="s", sequence_key_deltas=[-1])


# -------------------------------------------------------------- delete_range
async def test_delete_range(store):
    keys = [f"/dr/{i:02d}" for i in range(30)]
    await asyncio.gather(*(store.put(k, b"") for k in keys))
    await store.delete_range("/dr/05", "/dr/15")
    assert await collect(store.list("/dr/", "/dr/~")) == keys[:5] + keys[15:]
    await store.delete_range("/dr/", "/dr/~")
    assert await collect(store.list("/dr/", "/dr/~")) == []
    await asyncio.gather(*(store.put(k, b"", partition_key="q") for k in keys))
    await store.delete_range("/dr/10", "/dr/20", partition_key="q")
    assert await collect(store.list("/dr/", "/dr/~", partition_key="q")) == keys[:10] + keys[20:]
    # Slash order: deleting /dr/x/ .. /dr/x// removes direct children only.
    await store.put("/dr/x/1", b"", partition_key="q")
    await store.put("/dr/x/1/deep", b"", partition_key="q")
    await store.delete_range("/dr/x/", "/dr/x//", partition_key="q")
    assert await collect(store.list("/dr/x/", "/dr/x/~/~", partition_key="q")) == ["/dr/x/1/deep"]


# --------------------------------------------------------------- ephemeral
async def test_ephemeral_removed_on_close(backend):
    owner = backend.client(identity="owner-1")
    other = backend.client()
    try:
        r = await owner.put("/eph/a", b"x", ephemeral=True)
        assert r.version.session_id is not None and r.version.client_identity == "owner-1"
        await owner.put("/eph/b", b"x", ephemeral=True, partition_key="p")
        await owner.put("/eph/c", b"x")  # not ephemeral: survives
        await owner.put("/eph/d", b"x", ephemeral=True)
        await other.put("/eph/d", b"taken over")  # now a plain record: survives
        rec = await other.get("/eph/a")
        assert rec.version.session_id == r.version.session_id
        await owner.close()
        assert await other.get("/eph/a") is None
        assert await other.get("/eph/b", partition_key="p") is None
        assert (await other.get("/eph/c")).value == b"x"
        assert (await other.get("/eph/d")).value == b"taken over"
        with pytest.raises(MetadataClosed):
            await owner.put("/eph/e", b"x", ephemeral=True)
    finally:
        await owner.close()
        await other.close()


async def test_ephemeral_puts_of_a_batch_go_with_the_session_and_replace_another_sessions_records(backend):
    """A batch claims records at once (a dead owner's, say): its ephemeral ops bind them to this
    client's session, whatever session held them before, and its plain ops stay plain."""
    from nereus.meta import EXPECT_ABSENT, PutOp, PutResult

    before = backend.client(identity="dead-owner")
    owner = backend.client(identity="adopter")
    other = backend.client()
    try:
        held = await before.put("/many-eph/held", b"old", ephemeral=True)
        results = await owner.put_many([
            PutOp("/many-eph/held", b"new", expected_version_id=held.version.version_id, ephemeral=True),
            PutOp("/many-eph/fresh", b"x", expected_version_id=EXPECT_ABSENT, ephemeral=True),
            PutOp("/many-eph/p/1", b"x", partition_key="p", ephemeral=True),
            PutOp("/many-eph/plain", b"x"),
        ])
        assert all(isinstance(r, PutResult) for r in results), results
        assert {r.version.client_identity for r in results[:3]} == {"adopter"}
        assert results[3].version.session_id is None
        await before.close()  # the records it held before the batch are not its any more
        assert (await other.get("/many-eph/held")).value == b"new"
        await owner.close()
        assert await other.get("/many-eph/held") is None
        assert await other.get("/many-eph/fresh") is None
        assert await other.get("/many-eph/p/1", partition_key="p") is None
        assert (await other.get("/many-eph/plain")).value == b"x"
    finally:
        for client in (before, owner, other):
            await client.close()


async def test_a_dead_clients_session_is_ended_by_another_and_its_records_go_at_once(backend):
    """A client known dead need not wait for its lease: another ends the session that holds its
    records, in the record's shard, and only that session's records go."""
    dead = backend.client(identity="dead", session_timeout=6.0)
    alive = backend.client(identity="alive")
    other = backend.client()
    lost = asyncio.Event()
    dead.add_session_listener(lost.set)
    try:
        held = [await dead.put(f"/ended/{i}", b"x", ephemeral=True) for i in range(20)]
        await alive.put("/ended/alive", b"x", ephemeral=True)
        await dead.put("/ended/plain", b"x")
        keys = [f"/ended/{i}" for i in range(20)]
        async with other.notifications() as notes:
            # One session per shard: the first call for a shard ends it, the others find it gone.
            ended = [await other.end_session_of(key, rec.version.session_id) for key, rec in zip(keys, held)]
            got = await next_notes(notes, 20)
        assert ended[0] and 0 < sum(ended) <= 20
        assert {n.key for n in got} == set(keys)
        assert all(n.type == NotificationType.KEY_DELETED for n in got)
        for key in keys:
            assert await other.get(key) is None
        assert await other.get("/ended/alive") is not None and await other.get("/ended/plain") is not None
        assert not await other.end_session_of(keys[0], held[0].version.session_id)  # gone already
        # A session id is unique within its shard: the shards are told apart by name.
        shards = {await other.shard_of(key) for key in keys}
        assert len(shards) == sum(ended) and all(isinstance(name, str) for name in shards)
        await asyncio.wait_for(lost.wait(), 30)  # its own client hears the loss at its next heartbeat
    finally:
        for client in (dead, alive, other):
            await client.close()


async def test_ephemeral_removed_on_session_expiry(backend):
    owner = backend.client(session_timeout=2.0)
    other = backend.client()
    try:
        for i in range(10):
            await owner.put(f"/exp/{i}", b"x", ephemeral=True)
        await owner.put("/exp/keep", b"x")
        async with other.notifications() as notes:
            await backend.expire_sessions(owner)
            got = await next_notes(notes, 10)
        assert sorted(n.key for n in got) == sorted(f"/exp/{i}" for i in range(10))
        assert {n.type for n in got} == {NotificationType.KEY_DELETED}
        assert await collect(other.list("/exp/", "/exp/~")) == ["/exp/keep"]
    finally:
        await owner.close()
        await other.close()


async def test_session_survives_heartbeats(backend):
    owner = backend.client(session_timeout=2.0)
    try:
        await owner.put("/hb/a", b"x", ephemeral=True)
        for _ in range(3):  # heartbeats keep it alive over several timeouts
            await backend.advance_time(1.0)
            await asyncio.sleep(0.6)
        assert await owner.get("/hb/a") is not None
    finally:
        await owner.close()


# ----------------------------------------------------------- notifications
async def test_notifications_every_type(backend, store):
    watcher = backend.client()
    try:
        async with watcher.notifications() as notes:
            r1 = await store.put("/nt/a", b"1")
            r2 = await store.put("/nt/a", b"2")
            await store.delete("/nt/a")
            await store.put("/nt/b", b"1", partition_key="p")
            await store.delete_range("/nt/", "/nt/~", partition_key="p")
            got = await next_notes(notes, 5)
        assert [(n.type, n.key) for n in got] == [
            (NotificationType.KEY_CREATED, "/nt/a"),
            (NotificationType.KEY_MODIFIED, "/nt/a"),
            (NotificationType.KEY_DELETED, "/nt/a"),
            (NotificationType.KEY_CREATED, "/nt/b"),
            (NotificationType.KEY_RANGE_DELETED, "/nt/"),
        ]
        assert got[0].version_id == r1.version.version_id
        assert got[1].version_id == r2.version.version_id
        assert got[4].key_range_end == "/nt/~"
    finally:
        await watcher.close()


async def test_notifications_per_key_order(store):
    async with store.notifications() as notes:
        for i in range(20):
            await store.put("/ord", str(i).encode())
        got = await next_notes(notes, 20)
    vids = [n.version_id for n in got]
    assert vids == sorted(vids)
    assert got[0].type is NotificationType.KEY_CREATED
    assert {n.type for n in got[1:]} == {NotificationType.KEY_MODIFIED}


# -------------------------------------------------------------- concurrency
async def test_concurrent_cas_increments(store):
    def incr(old):
        return str(int(old or b"0") + 1).encode()

    await asyncio.gather(*(update(store, "/counter", incr) for _ in range(60)))
    rec = await store.get("/counter")
    assert rec.value == b"60"
    assert rec.version.modifications_count == 59


async def test_update_helper(store):
    r = await update(store, "/upd", lambda old: b"first" if old is None else old + b"!")
    assert r.value == b"first" and r.version.modifications_count == 0
    r = await update(store, "/upd", lambda old: old + b"!", partition_key=None)
    assert r.value == b"first!"
    same = await update(store, "/upd", lambda old: None)
    assert same.version == r.version
    assert await update(store, "/upd-none", lambda old: None) is None


async def test_retry_runs_a_step_again_until_its_write_wins(store):
    """Two steps race one record with side effects between read and write; each finishes once."""
    await store.put("/retry", b"0")
    runs = {"a": 0, "b": 0}
    both_read = asyncio.Event()
    readers = []

    async def step(name):
        runs[name] += 1
        rec = await store.get("/retry")
        readers.append(name)
        if len(readers) == 2:
            both_read.set()
        await asyncio.wait_for(both_read.wait(), 5)  # both read the same version: one write must lose
        await store.put("/retry", str(int(rec.value) + 1).encode(), expected_version_id=rec.version.version_id)
        return name

    assert sorted(await asyncio.gather(retry(lambda: step("a")), retry(lambda: step("b")))) == ["a", "b"]
    assert (await store.get("/retry")).value == b"2"
    assert sorted(runs.values()) == [1, 2]  # the loser ran again


async def test_retry_reads_again_on_request_and_gives_up_with_the_callers_error():
    calls = []

    async def moved_on():
        calls.append(1)
        if len(calls) < 3:
            raise ReadAgain
        return "done"

    assert await retry(moved_on) == "done" and len(calls) == 3

    async def always_losing():
        raise UnexpectedVersion("lost")

    with pytest.raises(UnexpectedVersion):
        await retry(always_losing, max_attempts=5)
    with pytest.raises(TimeoutError, match="busy"):
        await retry(always_losing, max_attempts=5, exhausted=lambda: TimeoutError("busy"))


async def test_update_helper_of_a_record_likely_absent(store):
    seen = []

    def fn(old):
        seen.append(old)
        return b"new" if old is None else old + b"+"

    r = await update(store, "/likely", fn, likely_absent=True)
    assert (r.value, seen) == (b"new", [None])  # created without reading first
    r = await update(store, "/likely", fn, likely_absent=True)
    assert (r.value, seen[1:]) == (b"new+", [None, b"new"])  # it existed: read, then written as usual
    assert (await store.get("/likely")).value == b"new+"
    assert await update(store, "/likely-none", lambda old: None, likely_absent=True) is None
    await asyncio.gather(*(update(store, "/likely-counter", lambda old: str(int(old or b"0") + 1).encode(),
                                  likely_absent=True) for _ in range(20)))
    assert (await store.get("/likely-counter")).value == b"20"


async def test_read_after_acknowledged_write(store):
    async def writer_then_reader(i):
        await store.put(f"/lin/{i % 5}", str(i).encode())
        assert (await store.get(f"/lin/{i % 5}")) is not None

    await asyncio.gather(*(writer_then_reader(i) for i in range(50)))
    for j in range(5):
        await store.put(f"/lin/{j}", b"final")
        assert (await store.get(f"/lin/{j}")).value == b"final"


# ---------------------------------------------------------------- bad input
async def test_bad_input(store):
    with pytest.raises(InvalidRequest):
        await store.put("/a\x00b", b"")
    with pytest.raises(InvalidRequest):
        await store.put(b"/bytes-key", b"")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await store.put("/k", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await store.put("/k", b"", expected_version_id=-2)
    with pytest.raises(InvalidRequest):
        await store.put("/k", b"", expected_version_id="1")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await store.get("/k\x00")
    with pytest.raises(InvalidRequest):
        await store.get("/k", comparison="ceiling")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await store.delete("/k", expected_version_id=-5)
    with pytest.raises(InvalidRequest):
        await collect(store.list("/a", "/b", page_size=0))
    with pytest.raises(InvalidRequest):
        await store.put("/" + "x" * 100_000, b"")


async def test_closed_client(backend):
    c = backend.client()
    await c.put("/closed", b"")
    await c.close()
    await c.close()  # idempotent
    with pytest.raises(MetadataClosed):
        await c.get("/closed")
    with pytest.raises(MetadataClosed):
        await c.put("/closed", b"")


async def test_put_many_gives_each_op_its_own_result(store):
    from nereus.meta import EXPECT_ABSENT, PutOp, PutResult, UnexpectedVersion
    first = await store.put("/batch/a", b"1")
    ops = [
        PutOp("/batch/a", b"2", expected_version_id=first.version.version_id),  # CAS succeeds
        PutOp("/batch/b", b"x", expected_version_id=EXPECT_ABSENT),  # create succeeds
        PutOp("/batch/a", b"3", expected_version_id=first.version.version_id),  # stale: fails alone
        PutOp("/batch/p/1", b"g", partition_key="/batch/p"),
        PutOp("/batch/p/2", b"t", partition_key="/batch/p"),
    ]
    results = await store.put_many(ops)
    assert isinstance(results[0], PutResult) and isinstance(results[1], PutResult)
    assert isinstance(results[2], UnexpectedVersion)
    assert all(isinstance(r, PutResult) for r in results[3:])
    assert (await store.get("/batch/a")).value == b"2"
    assert (await store.get("/batch/p/2", partition_key="/batch/p")).value == b"t"
    assert await store.put_many([]) == []
