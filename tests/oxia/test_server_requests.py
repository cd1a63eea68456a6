"""Malformed, oversized and out-of-place requests: an error status, and the server stays up."""

from __future__ import annotations

import grpc
import pytest
from grpc import aio

from nereus.meta.oxia.proto import client_pb2 as pb
from nereus.meta.oxia.proto import service as pbg


@pytest.fixture
async def stub(server, namespace):
    async with aio.insecure_channel(server.address, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        s = pbg.OxiaClientStub(ch)
        sa = await s.GetShardAssignments(pb.ShardAssignmentsRequest(namespace=namespace)).read()
        s.shards = [a.shard for a in sa.namespaces[namespace].assignments]
        s.md = (("namespace", namespace),)
        yield s


async def _code(coro) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as ei:
        r = await coro
        if hasattr(r, "__aiter__"):
            [x async for x in r]
    return ei.value.code()


async def _stream_code(call) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as ei:
        async for _ in call:
            pass
    return ei.value.code()


async def test_shard_map(stub, namespace):
    sa = await stub.GetShardAssignments(pb.ShardAssignmentsRequest(namespace=namespace)).read()
    nsa = sa.namespaces[namespace]
    assert nsa.shard_key_router == pb.XXHASH3
    ranges = sorted((a.int32_hash_range.min_hash_inclusive, a.int32_hash_range.max_hash_inclusive)
                    for a in nsa.assignments)
    assert ranges[0][0] == 0 and ranges[-1][1] == 2**32 - 1
    assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))


async def test_bad_requests_then_server_still_serves(stub):
    s0 = stub.shards[0]
    md = stub.md
    bad_puts = [
        pb.PutRequest(key="/a\x00b", value=b""),
        pb.PutRequest(key="/" + "x" * 2000, value=b""),
        pb.PutRequest(key="/k", value=b"x" * (9 << 20)),
        pb.PutRequest(key="/k", value=b"", expected_version_id=-7),
        pb.PutRequest(key="/k", value=b"", sequence_key_delta=[1]),  # no partition key
        pb.PutRequest(key="/k", value=b"", partition_key="p", sequence_key_delta=[0]),
        pb.PutRequest(key="/k", value=b"", secondary_indexes=[pb.SecondaryIndex(index_name="", secondary_key="s")]),
        pb.PutRequest(key="/k", value=b"", secondary_indexes=[pb.SecondaryIndex(index_name="i", secondary_key="\x00")]),
        pb.PutRequest(key="/k", value=b"", secondary_indexes=[pb.SecondaryIndex(index_name="i",
                                                                               secondary_key="s" * 600)]),
    ]
    for p in bad_puts:
        assert await _code(stub.Write(pb.WriteRequest(shard=s0, puts=[p]), metadata=md)) == \
            grpc.StatusCode.INVALID_ARGUMENT
    # The good put next to a bad one was not applied: requests are validated whole.
    await _code(stub.Write(pb.WriteRequest(shard=s0, puts=[pb.PutRequest(key="/good", value=b""),
                                                          bad_puts[0]]), metadata=md))
    r = await stub.Read(pb.ReadRequest(shard=s0, gets=[pb.GetRequest(key="/good")]), metadata=md).read()
    assert r.gets[0].status == pb.KEY_NOT_FOUND
    assert await _code(stub.Write(pb.WriteRequest(puts=[pb.PutRequest(key="/x")]), metadata=md)) == \
        grpc.StatusCode.INVALID_ARGUMENT  # no shard
    assert await _code(stub.Write(pb.WriteRequest(shard=10**9, puts=[pb.PutRequest(key="/x")]), metadata=md)) == \
        grpc.StatusCode.FAILED_PRECONDITION
    assert await _code(stub.Write(pb.WriteRequest(shard=s0, puts=[pb.PutRequest(key="/x")]),
                                  metadata=(("namespace", "no-such-ns"),))) == grpc.StatusCode.FAILED_PRECONDITION
    assert await _stream_code(stub.Read(pb.ReadRequest(shard=s0, gets=[pb.GetRequest(key="\x00")]), metadata=md)) \
        == grpc.StatusCode.INVALID_ARGUMENT
    assert await _stream_code(stub.List(pb.ListRequest(shard=s0, start_inclusive="a", end_exclusive="b",
                                                       secondary_index_name=""), metadata=md)) \
        == grpc.StatusCode.INVALID_ARGUMENT
    # Oversized: beyond the message limit, refused by gRPC itself.
    huge = pb.WriteRequest(shard=s0, puts=[pb.PutRequest(key=f"/h{i}", value=b"x" * (4 << 20)) for i in range(9)])
    assert await _code(stub.Write(huge, metadata=md)) == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Sessions: bad timeout, unknown session.
    assert await _code(stub.CreateSession(pb.CreateSessionRequest(shard=s0, session_timeout_ms=1))) == \
        grpc.StatusCode.INVALID_ARGUMENT
    assert await _code(stub.KeepAlive(pb.SessionHeartbeat(shard=s0, session_id=123456))) == grpc.StatusCode.NOT_FOUND
    assert await _code(stub.CloseSession(pb.CloseSessionRequest(shard=s0, session_id=123456))) == \
        grpc.StatusCode.NOT_FOUND
    put = pb.PutRequest(key="/eph", value=b"", session_id=123456, client_identity="x")
    w = await stub.Write(pb.WriteRequest(shard=s0, puts=[put]), metadata=md)
    assert w.puts[0].status == pb.SESSION_DOES_NOT_EXIST
    # A bad request on a write stream ends that stream only; earlier requests were answered.
    call = stub.WriteStream(metadata=md)
    await call.write(pb.WriteRequest(shard=s0, puts=[pb.PutRequest(key="/ws/1", value=b"1")]))
    await call.write(pb.WriteRequest(shard=s0, puts=[bad_puts[0]]))
    first = await call.read()
    assert first.puts[0].status == pb.OK
    with pytest.raises(grpc.RpcError) as ei:
        await call.read()
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # And the server still works.
    w = await stub.Write(pb.WriteRequest(shard=s0, puts=[pb.PutRequest(key="/after", value=b"ok")]), metadata=md)
    assert w.puts[0].status == pb.OK
    r = await stub.Read(pb.ReadRequest(shard=s0, gets=[pb.GetRequest(key="/after", include_value=True)]),
                        metadata=md).read()
    assert r.gets[0].value == b"ok"


async def test_garbage_bytes(server, stub):
    # Bytes that do not parse as the request message.
    async with aio.insecure_channel(server.address) as ch:
        raw = ch.unary_unary("/io.streamnative.oxia.proto.OxiaClient/Write")
        with pytest.raises(grpc.RpcError) as ei:
            await raw(b"\xff\xff\xff\xff\x0f garbage")
        assert ei.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT,
                                   grpc.StatusCode.UNKNOWN)
    w = await stub.Write(pb.WriteRequest(shard=stub.shards[1], puts=[pb.PutRequest(key="/g", value=b"")]),
                         metadata=stub.md)
    assert w.puts[0].status == pb.OK
