"""Remote clusters' records and the replication policy a replicator reads, over an in-memory engine."""

import json

import pytest

from nereus.ledger.clusters import (ClusterData, delete_cluster, get_cluster, list_clusters, put_cluster,
                                    replication_clusters)
from nereus.ledger.policies import policies_key, topic_policies_key


@pytest.fixture
def meta(memory_meta):
    return memory_meta


async def _put(meta, key: str, value: dict) -> None:
    await meta.put(key, json.dumps(value).encode())


async def test_records_round_trip(meta):
    fields = {"serviceUrl": "http://east:8080", "brokerServiceUrl": "pulsar://east:6650",
              "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
              "brokerClientAuthenticationParameters": "token:abc"}
    await put_cluster(meta, ClusterData("east", {**fields, "notKept": 1}))
    await put_cluster(meta, ClusterData("west", {}))
    assert await list_clusters(meta) == ["east", "west"]
    east = await get_cluster(meta, "east")
    assert east.fields == fields and east.broker_service_url == "pulsar://east:6650" and east.auth_token() == "abc"
    assert await delete_cluster(meta, "west") is True
    assert await delete_cluster(meta, "west") is False
    assert await get_cluster(meta, "west") is None and await list_clusters(meta) == ["east"]


async def test_replication_clusters_topic_policy_over_namespace_policy(meta):
    assert await replication_clusters(meta, "acme", "app", "orders") == []  # nothing set anywhere
    await _put(meta, policies_key("acme", "app"), {"retention_policies": None})
    assert await replication_clusters(meta, "acme", "app", "orders") == []  # a namespace without the policy
    await _put(meta, policies_key("acme", "app"), {"replication_clusters": ["east", "standalone"]})
    assert await replication_clusters(meta, "acme", "app", "orders") == ["east", "standalone"]

    await _put(meta, topic_policies_key("acme", "app", "orders"), {"replicationClusters": ["west"],
                                                                    "retention_policies": {}})
    assert await replication_clusters(meta, "acme", "app", "orders") == ["west"]
    # A partition reads its partitioned topic's policy; other topics keep the namespace's.
    assert await replication_clusters(meta, "acme", "app", "orders-partition-3") == ["west"]
    assert await replication_clusters(meta, "acme", "app", "invoices") == ["east", "standalone"]
    # A topic record without the policy (another policy set) falls back to the namespace's.
    await _put(meta, topic_policies_key("acme", "app", "orders"), {"retention_policies": {}})
    assert await replication_clusters(meta, "acme", "app", "orders-partition-0") == ["east", "standalone"]
