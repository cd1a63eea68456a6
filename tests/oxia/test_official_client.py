"""The official ``oxia`` client from PyPI (written by others) against ``nereus oxia``."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import oxia
import oxia.ex
import pytest

from nereus.meta.keys import compare_keys
from nereus.meta.oxia.client import OxiaMetadataStore
from tests.oxia.serverproc import ROOT

EQ, FLOOR, CEIL, LOWER, HIGHER = (oxia.ComparisonType.EQUAL, oxia.ComparisonType.FLOOR,
                                  oxia.ComparisonType.CEILING, oxia.ComparisonType.LOWER,
                                  oxia.ComparisonType.HIGHER)


def test_descriptors_coexist():
    # Our generated messages and the official client's live side by side in one process.
    from oxia.internal.proto.io.streamnative.oxia import proto as theirs

    from nereus.meta.oxia.proto import client_pb2 as ours

    m = ours.PutRequest(key="/k", value=b"v", expected_version_id=-1, sequence_key_delta=[1, 2],
                        partition_key="p", session_id=7, client_identity="me")
    t = theirs.PutRequest.FromString(m.SerializeToString())
    assert (t.key, t.value, t.expected_version_id, t.sequence_key_delta, t.partition_key, t.session_id,
            t.client_identity) == ("/k", b"v", -1, [1, 2], "p", 7, "me")
    assert ours.ShardAssignments.FromString(bytes(theirs.ShardAssignments())) == ours.ShardAssignments()


def test_put_get_delete_conditional(official):
    c = official()
    key, v1 = c.put("/a", b"one")
    assert key == "/a" and v1.modifications_count() == 0 and not v1.is_ephemeral()
    k, value, v = c.get("/a")
    assert (k, value, v.version_id()) == ("/a", b"one", v1.version_id())
    _, v2 = c.put("/a", "two", expected_version_id=v1.version_id())
    assert v2.modifications_count() == 1
    with pytest.raises(oxia.ex.UnexpectedVersionId):
        c.put("/a", b"x", expected_version_id=v1.version_id())
    with pytest.raises(oxia.ex.UnexpectedVersionId):
        c.put("/a", b"x", expected_version_id=oxia.EXPECTED_RECORD_DOES_NOT_EXIST)
    c.put("/new", b"n", expected_version_id=oxia.EXPECTED_RECORD_DOES_NOT_EXIST)
    with pytest.raises(oxia.ex.UnexpectedVersionId):
        c.delete("/a", expected_version_id=v1.version_id())
    assert c.delete("/a", expected_version_id=v2.version_id()) is True
    assert c.delete("/a") is False
    with pytest.raises(oxia.ex.KeyNotFound):
        c.get("/a")
    assert c.get("/new", include_value=False)[1] is None


def test_comparisons_list_and_scan_across_shards(official):
    c = official()
    keys = [f"/c/{i:03d}" for i in range(0, 60, 2)]  # spread over all 4 shards
    for k in keys:
        c.put(k, k.encode())
    assert c.get("/c/005", comparison_type=FLOOR)[0] == "/c/004"
    assert c.get("/c/005", comparison_type=CEIL)[0] == "/c/006"
    assert c.get("/c/006", comparison_type=LOWER)[0] == "/c/004"
    assert c.get("/c/006", comparison_type=HIGHER)[0] == "/c/008"
    assert c.get("/c/006", comparison_type=FLOOR)[0] == "/c/006"
    with pytest.raises(oxia.ex.KeyNotFound):
        c.get("/c/999", comparison_type=HIGHER)
    assert c.list("/c/", "/c/~") == keys
    assert c.list("/c/010", "/c/020") == keys[5:10]
    scanned = list(c.range_scan("/c/", "/c/~"))
    assert [k for k, _, _ in scanned] == keys and all(v == k.encode() for k, v, _ in scanned)
    # Oxia's slash order: children before grandchildren.
    c.put("/c/000/deep", b"")
    assert c.list("/c/", "/c//") == keys
    assert c.list("/c/", "/c/~/~")[-1] == "/c/000/deep"


def test_partition_keys_and_sequences(official):
    c = official()
    for i in range(20):
        c.put(f"/pk/{i:02d}", b"x", partition_key="tenant")
    assert c.list("/pk/", "/pk/~", partition_key="tenant") == [f"/pk/{i:02d}" for i in range(20)]
    assert c.get("/pk/03", partition_key="tenant")[1] == b"x"
    updates = c.get_sequence_updates("/seq/a", partition_key="tenant")
    try:
        k1, _ = c.put("/seq/a", b"1", partition_key="tenant", sequence_keys_deltas=[1])
        k2, _ = c.put("/seq/a", b"2", partition_key="tenant", sequence_keys_deltas=[4])
        assert (k1, k2) == ("/seq/a-%020d" % 1, "/seq/a-%020d" % 5)
        seen = []
        while not seen or seen[-1] != k2:
            seen.append(next(updates))
        assert seen == sorted(seen, key=lambda k: k) and seen[-1] == k2
        k3, _ = c.put("/seq/b", b"", partition_key="tenant", sequence_keys_deltas=[2, 3])
        assert k3 == "/seq/b-%020d-%020d" % (2, 3)
    finally:
        updates.close()
    with pytest.raises(oxia.ex.InvalidOptions):
        c.put("/seq/a", b"", sequence_keys_deltas=[1])


def test_delete_range_and_notifications(official):
    c = official()
    notes = c.get_notifications()
    try:
        _, v = c.put("/n/a", b"1")
        c.put("/n/a", b"2")
        c.delete("/n/a")
        c.put("/n/b", b"", partition_key="p")
        c.delete_range("/n/", "/n/~", partition_key="p")
        got = [next(notes) for _ in range(5)]
    finally:
        notes.close()
    T = oxia.NotificationType
    assert [(n.notification_type(), n.key()) for n in got] == [
        (T.KEY_CREATED, "/n/a"), (T.KEY_MODIFIED, "/n/a"), (T.KEY_DELETED, "/n/a"),
        (T.KEY_CREATED, "/n/b"), (T.KEY_RANGE_DELETED, "/n/")]
    assert got[0].version_id() == v.version_id() and got[4].key_range_end() == "/n/~"
    for i in range(30):
        c.put(f"/dr/{i:02d}", b"")
    c.delete_range("/dr/10", "/dr/20")  # every shard
    assert c.list("/dr/", "/dr/~") == [f"/dr/{i:02d}" for i in (*range(10), *range(20, 30))]


def test_ephemeral_vanish_on_close(official):
    owner, other = official(client_identifier="owner"), official()
    _, v = owner.put("/eph/a", b"x", ephemeral=True)
    owner.put("/eph/b", b"x", ephemeral=True, partition_key="p")
    assert v.is_ephemeral() and v.client_identity() == "owner"
    assert other.get("/eph/a")[2].session_id() == v.session_id()
    owner.close()
    with pytest.raises(oxia.ex.KeyNotFound):
        other.get("/eph/a")
    with pytest.raises(oxia.ex.KeyNotFound):
        other.get("/eph/b", partition_key="p")


OWNER = """
import sys, xxhash, oxia, oxia.internal.service_discovery as sd
class X:
    @staticmethod
    def xxh64(k): return xxhash.xxh64(k.encode())
sd.xxhash = X
c = oxia.Client(sys.argv[1], namespace=sys.argv[2], session_timeout_ms=2000)
c.put("/hung/a", b"x", ephemeral=True)
print("ready", flush=True)
sys.stdin.read()
"""


def test_ephemeral_vanish_on_session_timeout(official, server, namespace):
    # The owner process is SIGKILLed: no close, no heartbeats; the session times out.
    p = subprocess.Popen([sys.executable, "-c", OWNER, server.address, namespace],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert p.stdout.readline() == b"ready\n"
        other = official()
        assert other.get("/hung/a")[1] == b"x"
        p.send_signal(signal.SIGKILL)
        p.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                other.get("/hung/a")
            except oxia.ex.KeyNotFound:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the ephemeral record outlived its session")
    finally:
        p.kill()
        p.wait()


def test_namespaces_are_separate(official, namespace):
    a = official()
    b = official(namespace=namespace + "-other")
    a.put("/same", b"a")
    b.put("/same", b"b")
    assert a.get("/same")[1] == b"a" and b.get("/same")[1] == b"b"


def test_interop_with_nereus_client(official, xxh3_routing, server, namespace):
    # Routed as the shard map says (xxh3), the official client and ours share records.
    c = official()
    keys = [f"/io/{i:02d}" for i in range(24)]
    for k in keys:
        c.put(k, b"from-official")

    async def ours():
        async with OxiaMetadataStore(server.address, namespace) as s:
            assert [k async for k in s.list("/io/", "/io/~")] == keys
            for k in keys:
                assert (await s.get(k)).value == b"from-official"
            await s.put("/io/ours", b"from-nereus", partition_key="pk")
            await s.put("/io/plain", b"plain")

    asyncio.run(ours())
    assert c.get("/io/ours", partition_key="pk")[1] == b"from-nereus"
    assert c.get("/io/plain")[1] == b"plain"
    assert sorted(c.list("/io/", "/io/~"), key=lambda k: k) == sorted(keys + ["/io/ours", "/io/plain"])
    assert compare_keys("/io/ours", "/io/plain") < 0
