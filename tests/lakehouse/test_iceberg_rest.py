"""The broker's Iceberg REST catalog (``/iceberg``), read by pyiceberg's RestCatalog from a real standalone
with token authentication and authorization.

Topics get their built-in tables the way the compaction worker makes them (compacted, then
synced into the worker's catalog), without Spark. The catalog lists Pulsar's tenants and
namespaces, the topics with a table, and loads each table's current metadata, which
pyiceberg scans back to the records produced. Unknown names answer 404, writes 403, both
in the spec's error model; a request without a token 401; a role sees what it may consume.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request

import pytest

pulsar = pytest.importorskip("pulsar")
pytest.importorskip("pyiceberg")

from pyiceberg.catalog.rest import RestCatalog  # noqa: E402
from pyiceberg.exceptions import (ForbiddenError, NoSuchNamespaceError, NoSuchTableError,  # noqa: E402
                                  UnauthorizedError)

from nereus.auth.tokens import create_token  # noqa: E402
from nereus.lakehouse import sbt  # noqa: E402
from nereus.lakehouse.session import default_catalog_uri  # noqa: E402
from tests.lakehouse.compacting import compact_and_sync  # noqa: E402
from tests.standalone_fixtures import token_auth_standalone  # noqa: E402

EVENTS = "persistent://public/default/rest-events"
PARTED = "persistent://public/default/rest-parted"
OPEN = "persistent://public/readers/open-events"


node = token_auth_standalone("node", "iceberg-rest")


def token(node, role: str) -> str:
    return create_token(role, secret_key=node.secret)


def call(node, method: str, path: str, body=None, role: str | None = "admin", headers=None):
    """(status, JSON body or None, headers) of a call on the node's HTTP port; error statuses are returned."""
    data = None if body is None else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if role is not None:
        sent["Authorization"] = f"Bearer {token(node, role)}"
    request = urllib.request.Request(node.http + path, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None, response.headers
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        return exc.code, json.loads(raw) if raw else None, exc.headers


def produce(node, topic: str, count: int) -> list[tuple[str, bytes, dict]]:
    """(key, value, properties) of each message sent, in order."""
    client = pulsar.Client(node.url, authentication=pulsar.AuthenticationToken(token(node, "admin")))
    sent = []
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            key, value, props = f"k{i % 3}", b"value-%d" % i, {"i": str(i)}
            producer.send(value, partition_key=key, properties=props)
            sent.append((key, value, props))
    finally:
        client.close()
    return sent


@pytest.fixture(scope="module")
def tables(node):
    """Three topics with built-in tables: plain, partitioned (2) and one in a namespace a reader may consume."""
    assert call(node, "PUT", "/admin/v2/namespaces/public/readers", {})[0] == 204
    assert call(node, "PUT", "/admin/v2/namespaces/public/empty", {})[0] == 204
    assert call(node, "POST", "/admin/v2/namespaces/public/readers/permissions/reader", ["consume"])[0] == 204
    assert call(node, "PUT", "/admin/v2/persistent/public/default/rest-parted/partitions", 2)[0] == 204
    sent = {EVENTS: produce(node, EVENTS, 40), OPEN: produce(node, OPEN, 10)}
    for partition in (0, 1):  # each partition its own records (keys would route them all to one)
        sent[f"{PARTED}-partition-{partition}"] = produce(node, f"{PARTED}-partition-{partition}", 30 + partition)
    for topic in (EVENTS, OPEN, PARTED):
        assert asyncio.run(compact_and_sync(node, topic)), f"nothing to compact in {topic}"
    return sent


def rest_catalog(node, role: str | None = "admin") -> RestCatalog:
    extra = {} if role is None else {"token": token(node, role)}
    return RestCatalog("nereus", uri=f"{node.http}/iceberg", **extra)


def sbt_table(node, topic: str):
    """The table as the compaction worker's own catalog has it (what the broker must serve)."""
    objects_url = (node.data_dir / "objects").as_uri()
    return sbt.open_catalog(default_catalog_uri(objects_url), objects_url + "/iceberg").load_table(sbt.identifier(topic))


def test_namespaces_are_pulsars_tenants_and_namespaces(node, tables):
    catalog = rest_catalog(node)
    assert ("public",) in catalog.list_namespaces()
    assert {("public", "default"), ("public", "readers"), ("public", "empty")} <= set(catalog.list_namespaces("public"))
    assert catalog.list_namespaces(("public", "default")) == []
    assert catalog.load_namespace_properties(("public", "default")) == {}
    assert catalog.namespace_exists(("public", "readers"))
    assert not catalog.namespace_exists(("public", "never"))
    with pytest.raises(NoSuchNamespaceError):
        catalog.load_namespace_properties(("nope",))
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_namespaces("nope")


def test_tables_are_the_topics_with_a_builtin_table(node, tables):
    catalog = rest_catalog(node)
    listed = catalog.list_tables(("public", "default"))
    assert {("public", "default", "rest-events"), ("public", "default", "rest-parted")} <= set(listed)
    assert catalog.list_tables(("public", "empty")) == []
    assert catalog.list_tables("public") == []  # tables live in [tenant, namespace]
    assert catalog.table_exists(("public", "default", "rest-events"))
    assert not catalog.table_exists(("public", "default", "never"))
    with pytest.raises(NoSuchTableError):
        catalog.load_table(("public", "default", "never"))
    with pytest.raises(NoSuchTableError):  # a namespace of the table's path that does not exist: no table either
        catalog.load_table(("public", "never", "rest-events"))


def test_load_table_serves_the_current_metadata_and_scans_to_the_records_produced(node, tables):
    table = rest_catalog(node).load_table(("public", "default", "rest-events"))
    worker = sbt_table(node, EVENTS)
    assert table.metadata_location == worker.metadata_location
    assert table.metadata == worker.metadata
    assert table.current_snapshot().snapshot_id == worker.current_snapshot().snapshot_id
    ((first, end),) = sbt.read_offsets(table)["-1"]
    assert first == 0 and 0 < end <= 40
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["offset"])
    assert [r["offset"] for r in rows] == list(range(end))
    assert [(r["key"].decode(), r["value"], dict(r["properties"])) for r in rows] == tables[EVENTS][:end]
    assert {r["partition"] for r in rows} == {-1}


def test_a_partitioned_topic_is_one_table_with_its_partitions_as_a_column(node, tables):
    table = rest_catalog(node).load_table(("public", "default", "rest-parted"))
    assert table.metadata == sbt_table(node, PARTED).metadata
    offsets = sbt.read_offsets(table)
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["partition"], r["offset"]))
    assert {str(r["partition"]) for r in rows} == set(offsets) == {"0", "1"}
    for partition in (0, 1):
        ((first, end),) = offsets[str(partition)]
        mine = [r for r in rows if r["partition"] == partition]
        assert first == 0 and [r["offset"] for r in mine] == list(range(end))
        assert [(r["key"].decode(), r["value"], dict(r["properties"])) for r in mine] == \
            tables[f"{PARTED}-partition-{partition}"][:end]


def test_load_table_answers_304_for_the_current_etag_and_refs_only_snapshots(node, tables):
    path = "/iceberg/v1/namespaces/public%1Fdefault/tables/rest-events"
    status, body, headers = call(node, "GET", path)
    assert status == 200 and set(body) == {"metadata-location", "metadata", "config"}
    assert body["metadata"]["current-snapshot-id"] == sbt_table(node, EVENTS).current_snapshot().snapshot_id
    assert call(node, "GET", path, headers={"If-None-Match": headers["ETag"]})[0] == 304
    status, refs, _ = call(node, "GET", path + "?snapshots=refs")
    assert status == 200 and [s["snapshot-id"] for s in refs["metadata"]["snapshots"]] == [
        body["metadata"]["current-snapshot-id"]]
    assert call(node, "HEAD", path)[0] == 204
    assert call(node, "HEAD", "/iceberg/v1/namespaces/public%1Fdefault")[0] == 204


def test_config_lists_the_read_endpoints_only(node):
    status, config, _ = call(node, "GET", "/iceberg/v1/config?warehouse=anything")
    assert status == 200 and config["defaults"] == {} and config["overrides"] == {}
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in config["endpoints"]
    assert not [e for e in config["endpoints"] if not e.startswith(("GET ", "HEAD "))]
    with pytest.raises(NotImplementedError):  # so clients refuse writes without asking
        rest_catalog(node).create_namespace(("x",))


def test_unknown_names_answer_404_in_the_specs_error_model(node):
    status, body, _ = call(node, "GET", "/iceberg/v1/namespaces/nope%1Fx")
    assert status == 404 and body["error"]["type"] == "NoSuchNamespaceException" and body["error"]["code"] == 404
    status, body, _ = call(node, "GET", "/iceberg/v1/namespaces/public%1Fdefault/tables/never")
    assert status == 404 and body["error"]["type"] == "NoSuchTableException"
    assert "public.default.never" in body["error"]["message"]
    assert call(node, "HEAD", "/iceberg/v1/namespaces/public%1Fdefault/tables/never")[0] == 404
    status, body, _ = call(node, "GET", "/iceberg/v1/namespaces?parent=nope")
    assert status == 404 and body["error"]["type"] == "NoSuchNamespaceException"


@pytest.mark.parametrize("method, path, request_body", [
    ("POST", "/iceberg/v1/namespaces", {"namespace": ["x"]}),
    ("DELETE", "/iceberg/v1/namespaces/public%1Fdefault", None),
    ("POST", "/iceberg/v1/namespaces/public%1Fdefault/tables", {"name": "t", "schema": {}}),
    ("POST", "/iceberg/v1/namespaces/public%1Fdefault/tables/rest-events", {"requirements": [], "updates": []}),
    ("DELETE", "/iceberg/v1/namespaces/public%1Fdefault/tables/rest-events", None),
    ("POST", "/iceberg/v1/tables/rename", {"source": {}, "destination": {}}),
    ("POST", "/iceberg/v1/transactions/commit", {"table-changes": []}),
])
def test_writes_are_refused_as_forbidden_in_the_specs_error_model(node, method, path, request_body):
    status, body, _ = call(node, method, path, request_body)
    assert status == 403
    assert body["error"]["type"] == "ForbiddenException" and body["error"]["code"] == 403
    assert "read-only" in body["error"]["message"]


def test_without_a_valid_token_the_catalog_answers_401(node):
    for role in (None,):
        status, body, _ = call(node, "GET", "/iceberg/v1/config", role=role)
        assert status == 401 and body["error"]["type"] == "NotAuthorizedException" and body["error"]["code"] == 401
    status, _, _ = call(node, "GET", "/iceberg/v1/namespaces", role=None,
                        headers={"Authorization": "Bearer not-a-token"})
    assert status == 401
    with pytest.raises(UnauthorizedError):
        rest_catalog(node, role=None)


def test_a_role_sees_the_tables_it_may_consume(node, tables):
    reader = rest_catalog(node, "reader")
    assert reader.list_namespaces() == [("public",)]
    assert reader.list_namespaces("public") == [("public", "readers")]
    assert reader.list_tables(("public", "readers")) == [("public", "readers", "open-events")]
    rows = reader.load_table(("public", "readers", "open-events")).scan().to_arrow().to_pylist()
    assert 0 < len(rows) <= 10 and [r["value"] for r in sorted(rows, key=lambda r: r["offset"])] == [
        value for _key, value, _props in tables[OPEN][:len(rows)]]
    with pytest.raises(ForbiddenError):
        reader.load_table(("public", "default", "rest-events"))
    with pytest.raises(ForbiddenError):
        reader.list_tables(("public", "default"))
    nobody = rest_catalog(node, "nobody")
    assert nobody.list_namespaces() == []
