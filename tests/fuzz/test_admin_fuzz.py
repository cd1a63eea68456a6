"""Random bodies and path values on every admin route of a real standalone: a 4xx with a JSON reason, never a 500."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nereus.broker.http import build_app
from tests.standalone_process import Standalone


def _routes() -> list[tuple[str, str]]:
    out = set()
    for route in build_app().router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path")
        if path and path.startswith("/admin/") and route.method in ("PUT", "POST", "DELETE", "GET"):
            out.add((route.method, path))
    return sorted(out)


ROUTES = _routes()
# Field names of Pulsar's admin bodies, so random values reach the validation code.
FIELDS = ["retentionTimeInMinutes", "retentionSizeInMB", "adminRoles", "allowedClusters", "deduplicationEnabled",
          "allowAutoTopicCreation", "topicType", "defaultNumPartitions", "type", "schema", "properties",
          "compactionThreshold", "ledgerId", "entryId", "partitionIndex", "isExcluded", "batchIndex", "replicated",
          "messageId", "timestamp", "auth_policies", "replication_clusters", "bundles", "numBundles"]
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False),
                     st.text(max_size=8))
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.one_of(st.sampled_from(FIELDS), st.text(max_size=6)), inner, max_size=4)), max_leaves=8)
_path_values = {"tenant": "fz", "namespace": "ns", "topic": "t", "subscription": "s", "cluster": "standalone"}


@st.composite
def _requests(draw):
    method, template = draw(st.sampled_from(ROUTES))

    def value(match: re.Match) -> str:
        name = match.group(1).split(":")[0]
        known = _path_values.get(name)
        if known is not None and draw(st.booleans()):
            return known
        return urllib.request.quote(draw(st.one_of(st.text(min_size=1, max_size=8), st.integers().map(str))),
                                    safe="")

    path = re.sub(r"\{([^}]+)\}", value, template)
    body = draw(st.one_of(_json.map(lambda v: json.dumps(v).encode()), st.binary(max_size=32), st.just(b"")))
    return method, path, body


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    node = Standalone(tmp_path_factory.mktemp("admin-fuzz") / "data")
    node.start()
    seed = [("PUT", "/admin/v2/tenants/fz", {"allowedClusters": ["standalone"]}),
            ("PUT", "/admin/v2/namespaces/fz/ns", None), ("PUT", "/admin/v2/persistent/fz/ns/t", None)]
    for method, path, body in seed:
        _call(node, method, path, json.dumps(body).encode() if body is not None else b"")
    yield node
    node.stop()


def _call(node: Standalone, method: str, path: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(node.http + path, data=body if method in ("PUT", "POST") else None,
                                     method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_random_admin_requests_never_fail_with_500(node):
    assert len(ROUTES) > 30

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_requests())
    def run(request):
        method, path, body = request
        status, content = _call(node, method, path, body)
        assert status < 500 or status == 503, f"{method} {path} {body!r} -> {status} {content[:300]!r}"
        if status >= 400:
            assert "reason" in json.loads(content), f"{method} {path} -> {status} without a JSON reason"

    run()
    assert node.alive()
    assert _call(node, "GET", "/admin/v2/tenants", b"")[0] == 200
