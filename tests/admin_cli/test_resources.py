"""``nereus admin`` on tenants, namespaces, topics, clusters and brokers, against a real standalone."""

from __future__ import annotations

import json
import uuid

from .conftest import Admin


def test_tenants(admin: Admin):
    name = f"acme-{uuid.uuid4().hex[:6]}"
    admin.ok("tenants", "create", name, "-r", "ops,dev")
    assert name in admin.ok("tenants", "list").split()
    assert admin.json("tenants", "get", name) == {"adminRoles": ["dev", "ops"], "allowedClusters": ["standalone"]}
    table = admin.ok("tenants", "get", name)
    assert "adminRoles" in table and "dev,ops" in table
    admin.ok("tenants", "update", name, "-r", "ops")
    assert admin.json("tenants", "get", name)["adminRoles"] == ["ops"]
    admin.ok("namespaces", "create", f"{name}/ns")
    assert admin.json("namespaces", "list", name) == [f"{name}/ns"]
    busy = admin.run("tenants", "delete", name)
    assert busy.exit_code == 1 and busy.stderr == "conflict: The tenant still has active namespaces\n"
    admin.ok("namespaces", "delete", f"{name}/ns")
    admin.ok("tenants", "delete", name)
    gone = admin.run("tenants", "get", name)
    assert gone.exit_code == 1 and gone.stderr == "not found: Tenant does not exist\n" and gone.stdout == ""


def test_namespace_policies(admin: Admin, namespace):
    policies = admin.json("namespaces", "policies", namespace)
    assert policies["retention_policies"] is None and policies["replication_clusters"] == ["standalone"]
    assert "not set" in admin.ok("namespaces", "get-retention", namespace)
    assert admin.json("namespaces", "get-retention", namespace) is None
    admin.ok("namespaces", "set-retention", namespace, "--size", "2G", "--time", "3h")
    assert admin.json("namespaces", "get-retention", namespace) == {"retentionTimeInMinutes": 180,
                                                                    "retentionSizeInMB": 2048}
    table = admin.ok("namespaces", "get-retention", namespace)
    assert "180 min" in table and "2048 MB" in table
    admin.ok("namespaces", "set-retention", namespace, "-s", "-1", "-t", "-1")
    assert "unlimited" in admin.ok("namespaces", "get-retention", namespace)
    assert admin.json("namespaces", "policies", namespace)["retention_policies"] == {
        "retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    bad = admin.run("namespaces", "set-retention", namespace, "-s", "lots", "-t", "1h")
    assert bad.exit_code == 2 and "500M" in bad.stderr

    admin.ok("namespaces", "set-deduplication", namespace, "--disable")
    assert admin.json("namespaces", "get-deduplication", namespace) is False
    assert admin.ok("namespaces", "get-deduplication", namespace).strip() == "disabled"
    admin.ok("namespaces", "set-deduplication", namespace, "-e")
    assert admin.json("namespaces", "policies", namespace)["deduplicationEnabled"] is True


def test_topics(admin: Admin, namespace):
    plain, parted = f"persistent://{namespace}/plain", f"persistent://{namespace}/parted"
    admin.ok("topics", "create", plain)
    admin.ok("topics", "create-partitioned-topic", parted, "-p", "3")
    assert admin.json("topics", "list", namespace) == [f"{parted}-partition-{i}" for i in range(3)] + [plain]
    assert admin.ok("topics", "list-partitioned-topics", namespace).split() == [parted]
    assert admin.json("topics", "get-partitioned-topic-metadata", parted)["partitions"] == 3
    again = admin.run("topics", "create", plain)
    assert again.exit_code == 1 and again.stderr == "conflict: This topic already exists\n"
    stats = admin.json("topics", "partitioned-stats", parted, "--per-partition")
    assert stats["metadata"] == {"partitions": 3} and len(stats["partitions"]) == 3
    admin.ok("topics", "delete-partitioned-topic", parted)
    admin.ok("topics", "create-partitioned", parted, "-p", "2")  # the short names
    assert admin.json("topics", "get-partitioned-topic-metadata", parted)["partitions"] == 2
    admin.ok("topics", "delete-partitioned", parted)
    admin.ok("topics", "delete", plain)
    assert admin.json("topics", "list", namespace) == []
    missing = admin.run("topics", "delete", plain)
    assert missing.exit_code == 1 and missing.stderr == "not found: Topic not found\n"
    short = admin.run("topics", "create", "a/b/c/d")
    assert short.exit_code == 2 and "tenant/namespace/topic" in short.stderr


def test_topic_retention(admin: Admin, namespace):
    topic = f"persistent://{namespace}/kept"
    admin.ok("topics", "create", topic)
    assert admin.ok("topics", "get-retention", topic).strip() == "not set"
    admin.ok("namespaces", "set-retention", namespace, "-s", "10M", "-t", "1d")
    assert admin.json("topics", "get-retention", topic, "--applied") == {"retentionTimeInMinutes": 1440,
                                                                          "retentionSizeInMB": 10}
    admin.ok("topics", "set-retention", topic, "-s", "1G", "-t", "2w")
    assert admin.json("topics", "get-retention", topic) == {"retentionTimeInMinutes": 20160, "retentionSizeInMB": 1024}
    admin.ok("topics", "remove-retention", topic)
    assert admin.json("topics", "get-retention", topic) is None


def test_clusters_and_brokers(admin: Admin, standalone):
    assert admin.ok("clusters", "list").split() == ["standalone"]
    assert admin.json("clusters", "get", "standalone")["brokerServiceUrl"] == standalone.url
    assert admin.ok("brokers", "list", "standalone").split() == [f"127.0.0.1:{standalone.http_port}"]
    assert admin.ok("brokers", "list").split() == [f"127.0.0.1:{standalone.http_port}"]
    assert admin.ok("brokers", "healthcheck").strip() == "ok"
    assert admin.ok("brokers", "health").strip() == "ok"  # the short name
    assert "health " not in admin.ok("brokers", "--help")  # short names stay out of the help
    runtime = admin.json("brokers", "get-runtime-config")
    assert runtime["brokerServicePort"] == str(standalone.pulsar_port)
    assert json.loads(admin.ok("--json", "brokers", "list-dynamic-config")) == []
    missing = admin.run("clusters", "get", "elsewhere")
    assert missing.exit_code == 1 and missing.stderr.startswith("not found: ")
