"""Topic-level retention over REST, and retention taking effect with the topic's policy over the namespace's."""

from __future__ import annotations

import uuid

from .conftest import rest_path, wait_until

UNLIMITED = {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
NOTHING = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}


def _ns(admin) -> str:
    ns = f"public/tpol-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    return ns


def _fill(client, topic, count=20):
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(b"m%d" % i)
    producer.close()


def _start(admin, topic) -> int:
    return admin.ok("GET", rest_path(topic) + "/internalStats")["startOffset"]


def test_get_set_remove_and_applied(admin, client):
    ns = _ns(admin)
    topic = f"persistent://{ns}/t"
    path = rest_path(topic) + "/retention"
    assert admin.get(path) == (404, {"reason": "Topic not found"})
    assert admin.post(path, {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5})[0] == 404
    admin.ok("PUT", rest_path(topic))
    assert admin.get(path) == (204, None)  # unset, as Pulsar answers it
    # The broker default: defaultRetention* unset, unlimited (what Nereus applies).
    assert admin.ok("GET", path + "?applied=true") == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    admin.ok("POST", f"/namespaces/{ns}/retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100})
    assert admin.ok("GET", path + "?applied=true") == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}

    admin.ok("POST", path, {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5})
    assert admin.ok("GET", path) == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5}
    assert admin.ok("GET", path + "?applied=true") == {"retentionTimeInMinutes": 10, "retentionSizeInMB": 5}
    assert admin.post(path, {"retentionTimeInMinutes": -5, "retentionSizeInMB": 1})[0] == 412
    assert admin.post(path, ["x"])[0] == 400
    admin.ok("DELETE", path)
    assert admin.get(path) == (204, None)

    # Deleting the topic forgets its policies: a topic created again under the name starts without them.
    admin.ok("POST", path, UNLIMITED)
    admin.ok("DELETE", rest_path(topic))
    admin.ok("PUT", rest_path(topic))
    assert admin.get(path) == (204, None)


def test_partitioned_topic_policy(admin):
    ns = _ns(admin)
    topic = f"persistent://{ns}/p"
    admin.ok("PUT", rest_path(topic) + "/partitions", 2)
    admin.ok("POST", rest_path(topic) + "/retention", UNLIMITED)
    assert admin.ok("GET", rest_path(topic) + "/retention") == UNLIMITED
    # A partition answers its partitioned topic's policy.
    assert admin.ok("GET", rest_path(topic + "-partition-1") + "/retention") == UNLIMITED


def test_topic_retention_overrides_the_namespace(admin, client):
    ns = _ns(admin)
    kept, trimmed = f"persistent://{ns}/kept", f"persistent://{ns}/trimmed"
    _fill(client, kept)
    _fill(client, trimmed)
    # Topics without subscriptions count as fully acknowledged: retention 0 keeps nothing of them.
    admin.ok("POST", rest_path(kept) + "/retention", UNLIMITED)
    admin.ok("POST", f"/namespaces/{ns}/retention", NOTHING)
    wait_until(lambda: _start(admin, trimmed) > 0, timeout=20)
    admin.ok("POST", rest_path(kept) + "/trim")
    assert _start(admin, kept) == 0

    # The topic's policy removed: the namespace's applies to it again.
    admin.ok("DELETE", rest_path(kept) + "/retention")
    wait_until(lambda: _start(admin, kept) > 0, timeout=20)


def test_topic_retention_without_a_namespace_policy(admin, client):
    ns = _ns(admin)
    topic, other = f"persistent://{ns}/t", f"persistent://{ns}/other"
    _fill(client, topic)
    _fill(client, other)
    admin.ok("POST", rest_path(topic) + "/retention", NOTHING)
    wait_until(lambda: _start(admin, topic) > 0, timeout=20)
    admin.ok("POST", rest_path(other) + "/trim")
    assert _start(admin, other) == 0
