"""A Pulsar set-up script on an authenticated standalone: it creates ``public`` and ``public/default``
with its own admin roles and permissions (as the test services of Pulsar's client libraries do),
and those take effect instead of "already exists"; the next creation is a conflict again."""

from __future__ import annotations

import urllib.request
import uuid

import pulsar

from tests.auth.rest import rest_as
from tests.standalone_fixtures import token_auth_standalone

node = token_auth_standalone("node", "defaults", super_users="localhost,superUser,admin",
                             extra_config="anonymousUserRole=anonymous\n")


def _anonymous_put(node, path: str, body: bytes) -> int:
    request = urllib.request.Request(node.http + path, data=body, method="PUT",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15) as response:
        return response.status


def test_the_script_s_defaults_take_effect_and_anonymous_clients_use_them(node):
    everyone = {"namespace_auth": {"anonymous": ["produce", "consume"]}}
    assert rest_as(node, "superUser", "PUT", "/admin/v2/tenants/public",
                   {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]})[0] == 204
    assert rest_as(node, "superUser", "PUT", "/admin/v2/namespaces/public/default",
                   {"auth_policies": everyone, "replication_clusters": ["standalone"]})[0] == 204
    assert rest_as(node, "superUser", "PUT", "/admin/v2/namespaces/public/default-2",
                   {"auth_policies": everyone, "replication_clusters": ["standalone"]})[0] == 204
    # Created now, by the operator: conflicts from here on, as for any other tenant or namespace.
    status, body = rest_as(node, "superUser", "PUT", "/admin/v2/tenants/public", {"adminRoles": []})
    assert (status, body["reason"]) == (409, "Tenant already exists")
    status, body = rest_as(node, "superUser", "PUT", "/admin/v2/namespaces/public/default")
    assert (status, body["reason"]) == (409, "Namespace already exists")
    assert rest_as(node, "superUser", "GET", "/admin/v2/tenants/public")[1]["adminRoles"] == ["anonymous"]
    assert rest_as(node, "superUser", "GET", "/admin/v2/namespaces/public/default/permissions")[1] == {
        "anonymous": ["consume", "produce"]}

    # A client without credentials: the anonymous role, now a tenant admin with produce and consume.
    topic = f"persistent://public/default/set-up-{uuid.uuid4().hex[:8]}"
    assert _anonymous_put(node, f"/admin/v2/{topic.replace('://', '/')}/partitions", b"2") == 204
    client = pulsar.Client(node.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        producer.send(b"hello")
        assert consumer.receive(10_000).data() == b"hello"
        assert client.get_topic_partitions(topic) == [f"{topic}-partition-0", f"{topic}-partition-1"]
    finally:
        client.close()
