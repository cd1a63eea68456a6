"""Fuzz targets that need a running server: the admin REST API and the Oxia-protocol gRPC service.

Shared by the suite's short runs (``test_admin_fuzz``, ``test_oxia_fuzz``) and
``bench/fuzz.py``'s long ones: the hypothesis strategies of hostile requests and the
oracles (``check_admin``, ``check_oxia``) that raise AssertionError on a finding.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.request

import grpc
from hypothesis import strategies as st

from nereus.broker.http import build_app
from nereus.meta.oxia.proto import client_pb2 as pb

from .targets import _mutated

# -- Admin REST --------------------------------------------------------------------


def _routes() -> list[tuple[str, str]]:
    out = set()
    for route in build_app().router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path")
        if path and path.startswith("/admin/") and route.method in ("PUT", "POST", "DELETE", "GET"):
            out.add((route.method, path))
    return sorted(out)


ADMIN_ROUTES = _routes()
# Field names of Pulsar's admin bodies, so random values reach the validation code.
FIELDS = ["retentionTimeInMinutes", "retentionSizeInMB", "adminRoles", "allowedClusters", "deduplicationEnabled",
          "allowAutoTopicCreation", "topicType", "defaultNumPartitions", "type", "schema", "properties",
          "compactionThreshold", "ledgerId", "entryId", "partitionIndex", "isExcluded", "batchIndex", "replicated",
          "messageId", "timestamp", "auth_policies", "replication_clusters", "bundles", "numBundles"]
PATH_VALUES = {"tenant": "fz", "namespace": "ns", "topic": "t", "subscription": "s", "cluster": "standalone"}
# What the fixed path values name, created before fuzzing (and again after a fuzzed DELETE took them).
ADMIN_SETUP = [("PUT", "/admin/v2/tenants/fz", {"allowedClusters": ["standalone"]}),
               ("PUT", "/admin/v2/namespaces/fz/ns", None), ("PUT", "/admin/v2/persistent/fz/ns/t", None)]
_PARAM = re.compile(r"\{([^}]+)\}")

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                     st.text(max_size=8))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=6)), inner, max_size=4)), max_leaves=8)


def fill_path(template: str, value) -> str:
    """``template`` with each ``{name}`` replaced by ``value(name)``, quoted."""
    return _PARAM.sub(lambda m: urllib.request.quote(value(m.group(1).split(":")[0]), safe=""), template)


@st.composite
def admin_requests(draw):
    method, template = draw(st.sampled_from(ADMIN_ROUTES))

    def value(name: str) -> str:
        known = PATH_VALUES.get(name)
        if known is not None and draw(st.booleans()):
            return known
        return draw(st.one_of(st.text(min_size=1, max_size=8), st.integers().map(str)))

    body = draw(st.one_of(_json.map(lambda v: json.dumps(v).encode()), st.binary(max_size=32), st.just(b"")))
    return method, fill_path(template, value), body


class AdminClient:
    """One kept-alive HTTP connection to a broker's admin port."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.conn = http.client.HTTPConnection(host, port, timeout=30)

    def call(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, body=body if method in ("PUT", "POST") else None,
                                  headers={"Content-Type": "application/json"})
                response = self.conn.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, ConnectionError):
                # The server may close a kept-alive connection (e.g. after a 400 it could not parse); once more.
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def setup(self) -> None:
        for method, path, body in ADMIN_SETUP:
            self.call(method, path, json.dumps(body).encode() if body is not None else b"")

    def close(self) -> None:
        self.conn.close()


def check_admin(client: AdminClient, request: tuple[str, str, bytes]) -> None:
    """A hostile admin request gets a 4xx with a JSON reason (or 503), never a 500."""
    method, path, body = request
    status, content = client.call(method, path, body)
    assert status < 500 or status == 503, f"{method} {path} {body!r} -> {status} {content[:300]!r}"
    if status >= 400:
        assert "reason" in json.loads(content), f"{method} {path} -> {status} without a JSON reason"


# -- Oxia gRPC ---------------------------------------------------------------------

OXIA_SERVICE = "/io.streamnative.oxia.proto.OxiaClient/"
# Statuses a servicer that failed unexpectedly produces (an exception escaping a handler).
UNHANDLED = {grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL}
OXIA_NAMESPACE = "fuzz"
OXIA_METHODS = {"Write": (pb.WriteRequest, False), "Read": (pb.ReadRequest, True), "List": (pb.ListRequest, True),
                "RangeScan": (pb.RangeScanRequest, True), "CreateSession": (pb.CreateSessionRequest, False),
                "KeepAlive": (pb.SessionHeartbeat, False), "CloseSession": (pb.CloseSessionRequest, False)}

_keys = st.one_of(st.text(max_size=12), st.just("/k"), st.just("\x00"), st.text(min_size=600, max_size=700))
_ints = st.one_of(st.integers(-2, 5), st.integers(-(2**63), 2**63 - 1), st.integers(0, 40))
_puts = st.builds(lambda k, v, ver, sid, part, seq: pb.PutRequest(
    key=k, value=v, expected_version_id=ver, session_id=sid, partition_key=part, sequence_key_delta=seq),
    _keys, st.binary(max_size=16), _ints, st.one_of(st.just(0), _ints), _keys,
    st.lists(st.integers(0, 2**64 - 1), max_size=3))
_messages = st.one_of(
    st.builds(lambda s, p, d, r: ("Write", pb.WriteRequest(
        shard=s, puts=p, deletes=[pb.DeleteRequest(key=k) for k in d],
        delete_ranges=[pb.DeleteRangeRequest(start_inclusive=a, end_exclusive=b) for a, b in r])),
        _ints, st.lists(_puts, max_size=3), st.lists(_keys, max_size=2), st.lists(st.tuples(_keys, _keys), max_size=2)),
    st.builds(lambda s, g, idx: ("Read", pb.ReadRequest(
        shard=s, gets=[pb.GetRequest(key=k, include_value=True, comparison_type=c, secondary_index_name=idx)
                       for k, c in g])),
        _ints, st.lists(st.tuples(_keys, st.integers(0, 6)), max_size=3), st.one_of(st.just(""), _keys)),
    st.builds(lambda s, a, b, idx: ("List", pb.ListRequest(shard=s, start_inclusive=a, end_exclusive=b,
                                                           secondary_index_name=idx)),
              _ints, _keys, _keys, _keys),
    st.builds(lambda s, a, b: ("RangeScan", pb.RangeScanRequest(shard=s, start_inclusive=a, end_exclusive=b)),
              _ints, _keys, _keys),
    st.builds(lambda s, t, c: ("CreateSession", pb.CreateSessionRequest(
        shard=s, session_timeout_ms=t, client_identity=c)), _ints, st.integers(0, 2**31 - 1), _keys),
    st.builds(lambda s, i: ("KeepAlive", pb.SessionHeartbeat(shard=s, session_id=i)), _ints, _ints),
    st.builds(lambda s, i: ("CloseSession", pb.CloseSessionRequest(shard=s, session_id=i)), _ints, _ints),
)


@st.composite
def oxia_requests(draw):
    """(method, request bytes, with the namespace header): well-formed, or mutated (which may no longer parse)."""
    method, message = draw(_messages)
    raw = message.SerializeToString()
    if draw(st.booleans()):
        raw = draw(_mutated(st.just(raw)))
    return method, raw, draw(st.booleans())


def parses(method: str, raw: bytes) -> bool:
    try:
        OXIA_METHODS[method][0].FromString(raw)
    except Exception:
        return False
    return True


def check_oxia(channel: grpc.Channel, request: tuple[str, bytes, bool]) -> None:
    """A hostile request gets an answer or a clean status, never one of an unhandled error."""
    method, raw, with_namespace = request
    metadata = (("namespace", OXIA_NAMESPACE),) if with_namespace else None
    try:
        if OXIA_METHODS[method][1]:
            list(channel.unary_stream(OXIA_SERVICE + method)(raw, metadata=metadata, timeout=30))
        else:
            channel.unary_unary(OXIA_SERVICE + method)(raw, metadata=metadata, timeout=30)
    except grpc.RpcError as exc:
        # Bytes that are not the request message are refused by gRPC itself (INTERNAL).
        if parses(method, raw):
            assert exc.code() not in UNHANDLED, f"{method}: {exc.code()} {exc.details()}"
