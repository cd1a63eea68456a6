"""Tenants, namespaces and namespace policies over plain HTTP; retention applied to a topic."""

from __future__ import annotations

import uuid

from .conftest import rest_path, wait_until


def test_public_defaults_exist(admin):
    assert "public" in admin.ok("GET", "/tenants")
    assert "public/default" in admin.ok("GET", "/namespaces/public")
    assert admin.ok("GET", "/tenants/public")["allowedClusters"] == ["standalone"]


def test_tenant_lifecycle_and_errors(admin):
    name = f"tenant-{uuid.uuid4().hex[:6]}"
    assert admin.get(f"/tenants/{name}") == (404, {"reason": "Tenant does not exist"})
    assert admin.put(f"/tenants/{name}", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})[0] == 204
    assert admin.put(f"/tenants/{name}", {})[0] == 409
    assert admin.ok("GET", f"/tenants/{name}") == {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    assert name in admin.ok("GET", "/tenants")
    assert admin.put("/tenants/bad%20name")[0] == 412
    assert admin.call("PUT", f"/tenants/{name}-x", raw=b"{not json")[0] == 400

    assert admin.put(f"/namespaces/{name}/ns1")[0] == 204
    assert admin.put(f"/namespaces/{name}/ns1")[1] == {"reason": "Namespace already exists"}
    assert admin.ok("GET", f"/namespaces/{name}") == [f"{name}/ns1"]
    status, body = admin.delete(f"/tenants/{name}")
    assert (status, body["reason"]) == (409, "The tenant still has active namespaces")
    assert admin.delete(f"/namespaces/{name}/ns1")[0] == 204
    assert admin.delete(f"/namespaces/{name}/ns1")[0] == 404
    assert admin.delete(f"/tenants/{name}")[0] == 204
    assert admin.get(f"/tenants/{name}")[0] == 404
    assert admin.put(f"/namespaces/{name}/ns1")[0] == 404  # the tenant is gone


def test_namespace_policies(admin):
    ns = f"public/pol-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    assert admin.get(f"/namespaces/{ns}/retention") == (204, None)  # unset, as Pulsar answers
    admin.ok("POST", f"/namespaces/{ns}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1})
    assert admin.ok("GET", f"/namespaces/{ns}/retention") == {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert admin.post(f"/namespaces/{ns}/retention", {"retentionTimeInMinutes": -5})[0] == 412
    assert admin.post(f"/namespaces/{ns}/retention", [1, 2])[0] == 400

    admin.ok("POST", f"/namespaces/{ns}/deduplication", True)
    assert admin.ok("GET", f"/namespaces/{ns}/deduplication") is True
    assert admin.post(f"/namespaces/{ns}/deduplication", "yes")[0] == 400
    admin.ok("DELETE", f"/namespaces/{ns}/deduplication")
    assert admin.get(f"/namespaces/{ns}/deduplication") == (204, None)

    assert admin.ok("GET", f"/namespaces/{ns}/schemaCompatibilityStrategy") == "UNDEFINED"
    admin.ok("PUT", f"/namespaces/{ns}/schemaCompatibilityStrategy", "BACKWARD")
    policies = admin.ok("GET", f"/namespaces/{ns}")
    assert policies["schema_compatibility_strategy"] == "BACKWARD"
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert admin.post("/namespaces/public/nope/retention", {"retentionTimeInMinutes": 1})[0] == 404


def test_delete_namespace_with_topics(admin):
    ns = f"public/del-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    admin.ok("PUT", f"/persistent/{ns}/t1")
    assert admin.delete(f"/namespaces/{ns}")[1] == {"reason": "Cannot delete non empty namespace"}
    admin.ok("DELETE", f"/namespaces/{ns}?force=true")
    assert admin.get(f"/persistent/{ns}")[0] == 404


def _internal(admin, topic):
    return admin.ok("GET", rest_path(topic) + "/internalStats")


def test_retention_trims_acknowledged_data_only(admin, client):
    ns = f"public/ret-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    topic = f"persistent://{ns}/t"
    consumer = client.subscribe(topic, "slow")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(20):
        producer.send(b"m%d" % i)
    for _ in range(8):  # the subscription acknowledges the first 8 messages only
        consumer.acknowledge(consumer.receive(timeout_millis=10000))
    wait_until(lambda: _internal(admin, topic)["cursors"]["slow"]["markDeletePosition"].endswith(":7"))

    # Keep nothing that is acknowledged: the trim stops at the subscription's position.
    admin.ok("POST", f"/namespaces/{ns}/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
    stats = wait_until(lambda: (s := _internal(admin, topic))["startOffset"] > 0 and s)
    assert stats["startOffset"] <= 8
    assert stats["numberOfEntries"] == 20 - stats["startOffset"]
    before = admin.ok("GET", rest_path(topic) + "/stats")["subscriptions"]["slow"]["msgBacklog"]
    assert before == 12

    # Everything read and acknowledged: an explicit trim drops what the policy no longer keeps.
    for _ in range(12):
        consumer.acknowledge(consumer.receive(timeout_millis=10000))
    wait_until(lambda: _internal(admin, topic)["cursors"]["slow"]["markDeletePosition"].endswith(":19"))
    admin.ok("POST", rest_path(topic) + "/trim")
    stats = _internal(admin, topic)
    assert stats["startOffset"] > 8 and stats["totalSize"] < 20 * 40
    producer.send(b"after")
    assert consumer.receive(timeout_millis=10000).data() == b"after"


def test_created_with_every_kept_policy_of_the_body(admin):
    """The ``Policies`` body of a create: each field kept here is read back on its own path; Pulsar's
    defaults (UNDEFINED, empty maps, nulls) leave a policy unset."""
    ns = f"public/body-{uuid.uuid4().hex[:6]}"
    publish = {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
    dispatch = {"dispatchThrottlingRateInMsg": 50, "dispatchThrottlingRateInByte": -1,
                "relativeToPublishRate": False, "ratePeriodInSecond": 1}
    creation = {"allowAutoTopicCreation": False}
    admin.ok("PUT", f"/namespaces/{ns}", {
        "publishMaxMessageRate": {"standalone": publish}, "topicDispatchRate": {"standalone": dispatch},
        "subscriptionDispatchRate": {}, "compaction_threshold": 1048576, "autoTopicCreationOverride": creation,
        "is_allow_auto_update_schema": False, "schema_auto_update_compatibility_strategy": "Backward",
        "schema_compatibility_strategy": "UNDEFINED", "deduplicationEnabled": None, "auth_policies": {
            "namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}}})
    assert admin.ok("GET", f"/namespaces/{ns}/publishRate") == publish
    assert admin.ok("GET", f"/namespaces/{ns}/dispatchRate") == dispatch
    assert admin.get(f"/namespaces/{ns}/subscriptionDispatchRate")[0] == 204
    assert admin.ok("GET", f"/namespaces/{ns}/compactionThreshold") == 1048576
    assert admin.ok("GET", f"/namespaces/{ns}/autoTopicCreation")["allowAutoTopicCreation"] is False
    assert admin.ok("GET", f"/namespaces/{ns}/isAllowAutoUpdateSchema") is False
    assert admin.ok("GET", f"/namespaces/{ns}/schemaAutoUpdateCompatibilityStrategy") == "Backward"
    assert admin.ok("GET", f"/namespaces/{ns}/schemaCompatibilityStrategy") == "UNDEFINED"
    assert admin.get(f"/namespaces/{ns}/deduplication")[0] == 204
    bad = f"public/bad-{uuid.uuid4().hex[:6]}"
    status, body = admin.put(f"/namespaces/{bad}", {"publishMaxMessageRate": {"standalone": "fast"}})
    assert status == 400 and "PublishRate" in body["reason"], body
    status, body = admin.put(f"/namespaces/{bad}", {"deduplicationEnabled": "yes"})
    assert status == 400 and "deduplicationEnabled" in body["reason"], body
    assert admin.get(f"/namespaces/{bad}")[0] == 404
