"""Hostile Oxia-protocol requests through the real gRPC server: a clean status, never an unhandled error."""

from __future__ import annotations

import grpc
import pytest
from hypothesis import HealthCheck, given, settings

from nereus.meta.oxia.proto import client_pb2 as pb
from tests.oxia.conftest import _tmp
from tests.oxia.serverproc import shared_server

from .remote_targets import OXIA_NAMESPACE, OXIA_SERVICE, check_oxia, oxia_requests


@pytest.fixture(scope="module")
def channel():
    server = shared_server(_tmp.name)
    with grpc.insecure_channel(server.address) as ch:
        grpc.channel_ready_future(ch).result(timeout=30)
        yield ch


def test_hostile_requests_get_a_clean_status(channel):
    namespace = (("namespace", OXIA_NAMESPACE),)
    assignments = pb.ShardAssignments.FromString(next(channel.unary_stream(OXIA_SERVICE + "GetShardAssignments")(
        pb.ShardAssignmentsRequest(namespace=OXIA_NAMESPACE).SerializeToString())))
    shard = assignments.namespaces[OXIA_NAMESPACE].assignments[0].shard

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(oxia_requests())
    def run(request):
        check_oxia(channel, request)

    run()
    # The server still serves.
    put = pb.WriteRequest(shard=shard, puts=[pb.PutRequest(key="/after-fuzz", value=b"ok")])
    response = pb.WriteResponse.FromString(channel.unary_unary(OXIA_SERVICE + "Write")(
        put.SerializeToString(), metadata=namespace, timeout=30))
    assert response.puts[0].status == pb.OK
