"""Hostile Oxia-protocol requests through the real gRPC server: a clean status, never an unhandled error."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nereus.meta.oxia.proto import client_pb2 as pb
from tests.oxia.conftest import _tmp
from tests.oxia.serverproc import shared_server

from .targets import _mutated

SERVICE = "/io.streamnative.oxia.proto.OxiaClient/"
# Statuses a servicer that failed unexpectedly produces (an exception escaping a handler).
UNHANDLED = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}

_keys = st.one_of(st.text(max_size=12), st.just("/k"), st.just("\x00"), st.text(min_size=600, max_size=700))
_ints = st.one_of(st.integers(-2, 5), st.integers(-(2**63), 2**63 - 1), st.integers(0, 40))
_puts = st.builds(lambda k, v, ver, sid, part, seq: pb.PutRequest(
    key=k, value=v, expected_version_id=ver, session_id=sid, partition_key=part, sequence_key_delta=seq),
    _keys, st.binary(max_size=16), _ints, st.one_of(st.just(0), _ints), _keys,
    st.lists(st.integers(0, 2**64 - 1), max_size=3))
_requests = st.one_of(
    st.builds(lambda s, p, d, r: ("Write", False, pb.WriteRequest(
        shard=s, puts=p, deletes=[pb.DeleteRequest(key=k) for k in d],
        delete_ranges=[pb.DeleteRangeRequest(start_inclusive=a, end_exclusive=b) for a, b in r])),
        _ints, st.lists(_puts, max_size=3), st.lists(_keys, max_size=2), st.lists(st.tuples(_keys, _keys), max_size=2)),
    st.builds(lambda s, g, idx: ("Read", True, pb.ReadRequest(
        shard=s, gets=[pb.GetRequest(key=k, include_value=True, comparison_type=c, secondary_index_name=idx)
                       for k, c in g])),
        _ints, st.lists(st.tuples(_keys, st.integers(0, 6)), max_size=3), st.one_of(st.just(""), _keys)),
    st.builds(lambda s, a, b, idx: ("List", True, pb.ListRequest(shard=s, start_inclusive=a, end_exclusive=b,
                                                                 secondary_index_name=idx)),
              _ints, _keys, _keys, _keys),
    st.builds(lambda s, a, b: ("RangeScan", True, pb.RangeScanRequest(shard=s, start_inclusive=a, end_exclusive=b)),
              _ints, _keys, _keys),
    st.builds(lambda s, t, c: ("CreateSession", False, pb.CreateSessionRequest(
        shard=s, session_timeout_ms=t, client_identity=c)), _ints, st.integers(0, 2**31 - 1), _keys),
    st.builds(lambda s, i: ("KeepAlive", False, pb.SessionHeartbeat(shard=s, session_id=i)), _ints, _ints),
    st.builds(lambda s, i: ("CloseSession", False, pb.CloseSessionRequest(shard=s, session_id=i)), _ints, _ints),
)


@st.composite
def _wire_requests(draw):
    """A request as bytes: well-formed, or mutated (which may no longer parse)."""
    method, streaming, message = draw(_requests)
    raw = message.SerializeToString()
    if draw(st.booleans()):
        raw = draw(_mutated(st.just(raw)))
    return method, streaming, raw


@pytest.fixture(scope="module")
def channel():
    server = shared_server(_tmp.name)
    with grpc.insecure_channel(server.address) as ch:
        grpc.channel_ready_future(ch).result(timeout=30)
        yield ch


def _parses(method: str, raw: bytes) -> bool:
    cls = {"Write": pb.WriteRequest, "Read": pb.ReadRequest, "List": pb.ListRequest,
           "RangeScan": pb.RangeScanRequest, "CreateSession": pb.CreateSessionRequest,
           "KeepAlive": pb.SessionHeartbeat, "CloseSession": pb.CloseSessionRequest}[method]
    try:
        cls.FromString(raw)
    except Exception:
        return False
    return True


def test_hostile_requests_get_a_clean_status(channel):
    namespace = (("namespace", "fuzz"),)
    assignments = pb.ShardAssignments.FromString(next(channel.unary_stream(SERVICE + "GetShardAssignments")(
        pb.ShardAssignmentsRequest(namespace="fuzz").SerializeToString())))
    shard = assignments.namespaces["fuzz"].assignments[0].shard

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_wire_requests(), st.booleans())
    def run(request, with_namespace):
        method, streaming, raw = request
        metadata = namespace if with_namespace else None
        try:
            if streaming:
                list(channel.unary_stream(SERVICE + method)(raw, metadata=metadata, timeout=30))
            else:
                channel.unary_unary(SERVICE + method)(raw, metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            # Bytes that are not the request message are refused by gRPC itself (INTERNAL).
            if _parses(method, raw):
                assert exc.code() not in UNHANDLED, f"{method}: {exc.code()} {exc.details()}"

    run()
    # The server still serves.
    put = pb.WriteRequest(shard=shard, puts=[pb.PutRequest(key="/after-fuzz", value=b"ok")])
    response = pb.WriteResponse.FromString(channel.unary_unary(SERVICE + "Write")(
        put.SerializeToString(), metadata=namespace, timeout=30))
    assert response.puts[0].status == pb.OK
