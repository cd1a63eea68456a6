"""``nereus admin`` verbs of geo-replication, as pulsar-admin names them, against a real standalone:
clusters create/update/delete, namespaces set-clusters/get-clusters, topics *-replication-clusters."""

from __future__ import annotations

import uuid

from .conftest import Admin


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_clusters_create_update_delete(admin: Admin):
    name = _name("east")
    admin.ok("clusters", "create", name, "--url", "http://east:8080", "--broker-url", "pulsar://east:6650",
             "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
             "--auth-parameters", "token:abc")
    assert name in admin.ok("clusters", "list").split()
    assert admin.json("clusters", "get", name) == {
        "serviceUrl": "http://east:8080", "brokerServiceUrl": "pulsar://east:6650",
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": "token:abc"}
    again = admin.run("clusters", "create", name, "--broker-url", "pulsar://east:6650")
    assert again.exit_code == 1 and again.stderr.startswith("conflict: Cluster already exists")
    bad = admin.run("clusters", "create", _name("bad"), "--broker-url", "http://east:6650")
    assert bad.exit_code == 1 and "Illegal broker service url" in bad.stderr

    # update changes the fields given and keeps the others.
    admin.ok("clusters", "update", name, "--url-secure", "https://east:8443", "--broker-url-secure",
             "pulsar+ssl://east:6651", "--tls-enable", "--tls-trust-certs-filepath", "/etc/ca.pem",
             "--tls-allow-insecure")
    data = admin.json("clusters", "get", name)
    assert data["brokerServiceUrlTls"] == "pulsar+ssl://east:6651" and data["serviceUrlTls"] == "https://east:8443"
    assert data["brokerClientTlsEnabled"] is True and data["tlsAllowInsecureConnection"] is True
    assert data["brokerClientTrustCertsFilePath"] == "/etc/ca.pem"
    assert data["brokerClientAuthenticationParameters"] == "token:abc"
    admin.ok("clusters", "update", name, "--tls-disable")
    assert admin.json("clusters", "get", name)["brokerClientTlsEnabled"] is False
    missing = admin.run("clusters", "update", _name("nowhere"), "--url", "http://x:8080")
    assert missing.exit_code == 1 and missing.stderr.startswith("not found: ")

    admin.ok("clusters", "update-peer-clusters", name, "--peer-clusters", "standalone")
    assert admin.json("clusters", "get-peer-clusters", name) == ["standalone"]
    admin.ok("clusters", "delete", name)
    assert name not in admin.ok("clusters", "list").split()
    gone = admin.run("clusters", "delete", name)
    assert gone.exit_code == 1 and gone.stderr.startswith("not found: ")


def test_namespace_and_topic_replication_clusters(admin: Admin):
    remote, tenant = _name("west"), _name("geo")
    admin.ok("clusters", "create", remote, "--broker-url", f"pulsar://{remote}:6650")
    admin.ok("tenants", "create", tenant, "--allowed-clusters", f"standalone,{remote}")
    ns, topic = f"{tenant}/app", f"persistent://{tenant}/app/orders"
    admin.ok("namespaces", "create", ns)
    assert admin.ok("namespaces", "get-clusters", ns).split() == ["standalone"]
    admin.ok("namespaces", "set-clusters", ns, "--clusters", f"standalone,{remote}")
    assert admin.json("namespaces", "get-clusters", ns) == ["standalone", remote]
    refused = admin.run("namespaces", "set-clusters", ns, "-c", "standalone,nowhere")
    assert refused.exit_code == 1 and refused.stderr.startswith("forbidden: Invalid cluster id: nowhere")
    in_use = admin.run("clusters", "delete", remote)
    assert in_use.exit_code == 1 and in_use.stderr.startswith("precondition failed: Cluster not empty")

    admin.ok("topics", "create", topic)
    assert admin.ok("topics", "get-replication-clusters", topic).strip() == "not set (the namespace's apply)"
    assert admin.json("topics", "get-replication-clusters", topic, "--applied") == ["standalone", remote]
    admin.ok("topics", "set-replication-clusters", topic, "--clusters", remote)
    assert admin.ok("topics", "get-replication-clusters", topic).split() == [remote]
    empty = admin.run("topics", "set-replication-clusters", topic, "-c", "")
    assert empty.exit_code == 1 and empty.stderr.startswith("precondition failed: ")
    admin.ok("topics", "remove-replication-clusters", topic)
    assert admin.json("topics", "get-replication-clusters", topic) is None
