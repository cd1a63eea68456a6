"""Secondary indexes, session timeout bounds and the key-length limit, with the
official ``oxia`` client against a real ``nereus oxia`` process."""

from __future__ import annotations

import grpc
import oxia
import oxia.ex
import pytest
from grpc import aio

from nereus.meta.keys import shard_index
from nereus.meta.oxia.proto import client_pb2 as pb
from nereus.meta.oxia.proto import service as pbg
from tests.oxia.serverproc import ServerProcess

EQ, FLOOR, CEIL, LOWER, HIGHER = (oxia.ComparisonType.EQUAL, oxia.ComparisonType.FLOOR,
                                  oxia.ComparisonType.CEILING, oxia.ComparisonType.LOWER,
                                  oxia.ComparisonType.HIGHER)


def _by_index(c, lo: str, hi: str, **kw) -> list[str]:
    return c.list(lo, hi, use_index="name", **kw)


def test_index_on_one_shard_follows_updates_and_deletes(official, xxh3_routing):
    c = official()
    p = {"partition_key": "p"}
    c.put("/p/a", b"A", secondary_indexes={"name": "m"}, **p)
    c.put("/p/b", b"B", secondary_indexes={"name": "k", "other": "x"}, **p)
    c.put("/p/c", b"C", secondary_indexes={"name": "z"}, **p)
    c.put("/p/d", b"D", secondary_indexes={"name": "k"}, **p)
    c.put("/p/plain", b"-", **p)
    # Index order (secondary key, then primary key), not primary key order.
    assert _by_index(c, "a", "zz", **p) == ["/p/b", "/p/d", "/p/a", "/p/c"]
    assert _by_index(c, "l", "z", **p) == ["/p/a"]  # the end is exclusive
    assert c.list("a", "z", use_index="other", **p) == ["/p/b"]
    assert [(k, v) for k, v, _ in c.range_scan("k", "n", use_index="name", **p)] == \
        [("/p/b", b"B"), ("/p/d", b"D"), ("/p/a", b"A")]

    def get(key: str, cmp=EQ) -> str:
        return c.get(key, comparison_type=cmp, use_index="name", **p)[0]

    k, value, version = c.get("k", use_index="name", **p)
    assert (k, value) == ("/p/b", b"B")  # the primary key and its record
    assert version.version_id() == c.get("/p/b")[2].version_id()
    assert get("m", FLOOR) == "/p/a"  # exact: that entry
    assert get("l", FLOOR) == "/p/d"  # else the last entry of the nearest lower key
    assert get("m", LOWER) == "/p/d"
    assert get("l", CEIL) == "/p/a"
    assert get("m", CEIL) == "/p/a"
    assert get("m", HIGHER) == "/p/c"
    assert get("k", HIGHER) == "/p/a"
    for key, cmp in [("q", EQ), ("z", HIGHER), ("k", LOWER), ("a", FLOOR), ("zz", CEIL)]:
        with pytest.raises(oxia.ex.KeyNotFound):
            c.get(key, comparison_type=cmp, use_index="name", **p)
    with pytest.raises(oxia.ex.KeyNotFound):
        c.get("m", use_index="no-such-index", **p)

    # An update replaces the record's entries: the old ones are gone.
    c.put("/p/a", b"A2", secondary_indexes={"name": "a"}, **p)
    assert _by_index(c, "a", "zz", **p) == ["/p/a", "/p/b", "/p/d", "/p/c"]
    with pytest.raises(oxia.ex.KeyNotFound):
        c.get("m", use_index="name", **p)
    assert c.get("a", use_index="name", **p)[:2] == ("/p/a", b"A2")
    c.put("/p/b", b"B2", **p)  # no indexes any more
    assert _by_index(c, "a", "zz", **p) == ["/p/a", "/p/d", "/p/c"]
    assert c.list("a", "z", use_index="other", **p) == []
    # Deleted with the record, one by one or by range.
    assert c.delete("/p/d", partition_key="p")
    assert _by_index(c, "a", "zz", **p) == ["/p/a", "/p/c"]
    with pytest.raises(oxia.ex.KeyNotFound):
        c.get("k", use_index="name", **p)
    c.delete_range("/p/", "/p/c", partition_key="p")
    assert _by_index(c, "a", "zz", **p) == ["/p/c"]
    # ... and with an ephemeral record's session.
    owner = official()
    owner.put("/p/e", b"E", ephemeral=True, secondary_indexes={"name": "e"}, **p)
    assert _by_index(c, "a", "zz", **p) == ["/p/e", "/p/c"]
    owner.close()
    assert _by_index(c, "a", "zz", **p) == ["/p/c"]


def test_index_across_shards(official, xxh3_routing):
    # Keys spread over the namespace's shards; the client asks every shard and
    # merges. (This client merges by primary key, so the primary keys here sort as
    # their secondary keys do.)
    c = official()
    keys = [f"/m/{i:02d}" for i in range(12)]
    assert len({shard_index(k, 4) for k in keys}) > 1
    for i, k in enumerate(keys):
        c.put(k, f"v{i}", secondary_indexes={"seq": f"s{i:02d}", "parity": "odd" if i % 2 else "even"})
    assert c.list("s", "t", use_index="seq") == keys
    assert c.list("even", "even~", use_index="parity") == keys[0::2]
    assert [(k, v) for k, v, _ in c.range_scan("s03", "s07", use_index="seq")] == \
        [(keys[i], f"v{i}".encode()) for i in range(3, 7)]
    assert c.get("s05", use_index="seq")[:2] == (keys[5], b"v5")
    assert c.get("s055", comparison_type=CEIL, use_index="seq")[0] == keys[6]
    assert c.get("s055", comparison_type=FLOOR, use_index="seq")[0] == keys[5]
    assert c.get("s05", comparison_type=HIGHER, use_index="seq")[0] == keys[6]
    assert c.get("s05", comparison_type=LOWER, use_index="seq")[0] == keys[4]
    with pytest.raises(oxia.ex.KeyNotFound):
        c.get("s99", use_index="seq")
    c.put(keys[0], b"moved", secondary_indexes={"seq": "s99"})
    assert c.get("s99", use_index="seq")[:2] == (keys[0], b"moved")
    assert c.list("s", "t", use_index="seq") == keys  # the same keys, "/m/00" now last in the index
    assert c.list("s", "s02", use_index="seq") == [keys[1]]
    c.delete_range("/m/", "/m//")
    assert c.list("s", "t", use_index="seq") == []


def test_index_survives_a_kill(tmp_path, monkeypatch):
    # Entries are written with their record in one transaction: a SIGKILL right after
    # the acknowledgements loses none, and no stale entry comes back.
    import oxia.internal.service_discovery as sd

    from tests.oxia.conftest import _Xxh3Router

    monkeypatch.setattr(sd, "xxhash", _Xxh3Router)
    srv = ServerProcess(str(tmp_path / "data"), shards=2).start()
    try:
        c = oxia.Client(srv.address)
        for i in range(6):
            c.put(f"/r/{i}", f"v{i}", secondary_indexes={"idx": f"k{i}"})
        c.put("/r/1", b"updated", secondary_indexes={"idx": "k9"})
        c.delete("/r/2")
        c.close()
        srv.kill()
        srv.start()
        c = oxia.Client(srv.address)
        try:
            assert c.list("k", "l", use_index="idx") == ["/r/0", "/r/1", "/r/3", "/r/4", "/r/5"]
            assert c.get("k9", use_index="idx")[:2] == ("/r/1", b"updated")
            for gone in ("k1", "k2"):
                with pytest.raises(oxia.ex.KeyNotFound):
                    c.get(gone, use_index="idx")
            # The recovered record still knows its entries: the next update moves them.
            c.put("/r/3", b"again", secondary_indexes={"idx": "k0"})
            assert [k for k, _, _ in c.range_scan("k0", "k1", use_index="idx")] == ["/r/0", "/r/3"]
            with pytest.raises(oxia.ex.KeyNotFound):
                c.get("k3", use_index="idx")
        finally:
            c.close()
    finally:
        srv.stop()


def test_session_timeout_bounds(official):
    # Oxia's bounds are 2 s and 5 min, both included.
    for ms in (2_000, 300_000):
        c = official(session_timeout_ms=ms)
        c.put("/eph", b"x", ephemeral=True)
    c = official(session_timeout_ms=300_001)
    with pytest.raises(grpc.RpcError) as ei:
        c.put("/eph-long", b"x", ephemeral=True)
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid session timeout" in ei.value.details()
    assert "2000" in ei.value.details() and "300000" in ei.value.details()


async def test_session_timeout_below_the_bound(server, namespace):
    # The official client refuses < 2 s itself; a raw request reaches the server.
    async with aio.insecure_channel(server.address) as ch:
        stub = pbg.OxiaClientStub(ch)
        sa = await stub.GetShardAssignments(pb.ShardAssignmentsRequest(namespace=namespace)).read()
        shard = sa.namespaces[namespace].assignments[0].shard
        md = (("namespace", namespace),)
        with pytest.raises(grpc.RpcError) as ei:
            await stub.CreateSession(pb.CreateSessionRequest(shard=shard, session_timeout_ms=1_999,
                                                             client_identity="x"), metadata=md)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "oxia: invalid session timeout" in ei.value.details()
        assert "timeoutMs=1999" in ei.value.details()


def test_key_length_limit(official, xxh3_routing):
    c = official()
    longest = "/" + "x" * 497  # 498 UTF-8 bytes + 1 + one "/": 500 stored bytes
    assert c.put(longest, b"ok")[0] == longest
    assert c.get(longest)[1] == b"ok"
    with pytest.raises(grpc.RpcError) as ei:
        c.put(longest + "x", b"no")
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "key too long" in ei.value.details() and "the limit is 500" in ei.value.details()
    with pytest.raises(grpc.RpcError) as ei:
        c.put("/k", b"no", secondary_indexes={"idx": "s" * 600})
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "secondary index entry too long" in ei.value.details()
    assert "the limit is 500" in ei.value.details()
