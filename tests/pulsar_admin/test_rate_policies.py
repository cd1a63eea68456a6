"""Pulsar's publishRate, dispatchRate and subscriptionDispatchRate policies over REST, enforced by throttling."""

from __future__ import annotations

import uuid

import pulsar

from .conftest import rest_path

PUBLISH = {"publishThrottlingRateInMsg": -1, "publishThrottlingRateInByte": 2000}
DISPATCH = {"dispatchThrottlingRateInMsg": 2, "dispatchThrottlingRateInByte": -1, "relativeToPublishRate": False,
            "ratePeriodInSecond": 1}


def _ns(admin) -> str:
    ns = f"public/rate-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    return ns


def test_namespace_rate_policies_get_set_remove(admin):
    ns = _ns(admin)
    for suffix, value in (("publishRate", PUBLISH), ("dispatchRate", DISPATCH), ("subscriptionDispatchRate", DISPATCH)):
        path = f"/namespaces/{ns}/{suffix}"
        assert admin.get(path) == (204, None)
        admin.ok("POST", path, value)
        assert admin.ok("GET", path) == value
        assert admin.post(path, {"ratePeriodInSecond": 0, "publishThrottlingRateInMsg": "x"})[0] == 400
        assert admin.post(path, [1])[0] == 400
    policies = admin.ok("GET", f"/namespaces/{ns}")
    assert list(policies["publishMaxMessageRate"].values()) == [PUBLISH]
    assert list(policies["topicDispatchRate"].values()) == [DISPATCH]
    admin.ok("DELETE", f"/namespaces/{ns}/publishRate")
    assert admin.get(f"/namespaces/{ns}/publishRate") == (204, None)
    assert admin.post("/namespaces/public/missing-ns/publishRate", PUBLISH)[0] == 404


def test_topic_rate_policy_overrides_the_namespace_and_applied_falls_back(admin):
    ns = _ns(admin)
    topic = f"persistent://{ns}/t"
    path = rest_path(topic) + "/dispatchRate"
    assert admin.get(path)[0] == 404
    admin.ok("PUT", rest_path(topic))
    assert admin.get(path) == (204, None)
    admin.ok("POST", f"/namespaces/{ns}/dispatchRate", DISPATCH)
    assert admin.ok("GET", path + "?applied=true") == DISPATCH
    own = dict(DISPATCH, dispatchThrottlingRateInMsg=50)
    admin.ok("POST", path, own)
    assert admin.ok("GET", path) == own
    admin.ok("DELETE", path)
    assert admin.get(path) == (204, None)


def test_publish_rate_pauses_the_producer_and_loses_nothing(admin, client):
    ns = _ns(admin)
    topic = f"persistent://{ns}/pub"
    admin.ok("PUT", rest_path(topic))
    admin.ok("POST", rest_path(topic) + "/publishRate", PUBLISH)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(bytes([i]) * 1000) for i in range(5)]  # 5000 bytes against 2000 bytes/s
    assert len(set(map(str, ids))) == 5
    stats = admin.ok("GET", rest_path(topic) + "/stats")
    assert stats["publishRateLimitedTimes"] >= 1
    assert stats["msgInCounter"] == 5
    producer.close()


def _drain_throttled(admin, client, topic: str, count: int) -> dict:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(b"m%d" % i)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=10000).data() for _ in range(count)]
    assert got == [b"m%d" % i for i in range(count)]
    consumer.close()
    producer.close()
    return admin.ok("GET", rest_path(topic) + "/stats")["subscriptions"]["s"]


def test_subscription_dispatch_rate_of_the_namespace_throttles_delivery(admin, client):
    ns = _ns(admin)
    admin.ok("POST", f"/namespaces/{ns}/subscriptionDispatchRate", DISPATCH)
    sub = _drain_throttled(admin, client, f"persistent://{ns}/sub", 5)
    assert sub["dispatchThrottledMsgEventsBySubscriptionLimit"] >= 1
    assert sub["dispatchThrottledMsgEventsByTopicLimit"] == 0


def test_topic_dispatch_rate_throttles_delivery(admin, client):
    ns = _ns(admin)
    topic = f"persistent://{ns}/disp"
    admin.ok("PUT", rest_path(topic))
    admin.ok("POST", rest_path(topic) + "/dispatchRate", DISPATCH)
    sub = _drain_throttled(admin, client, topic, 5)
    assert sub["dispatchThrottledMsgEventsByTopicLimit"] >= 1


def test_admin_command_sets_gets_and_removes_rates(admin, standalone):
    import json
    import subprocess
    import sys

    ns = _ns(admin)

    def cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "nereus.cli", "admin", "--url", standalone.http, *args],
                              check=True, capture_output=True, text=True, timeout=60).stdout

    cli("namespaces", "set-publish-rate", ns, "-m", "10", "-b", "4096")
    assert admin.ok("GET", f"/namespaces/{ns}/publishRate") == {"publishThrottlingRateInMsg": 10,
                                                                 "publishThrottlingRateInByte": 4096}
    cli("namespaces", "set-subscription-dispatch-rate", ns, "-md", "100", "-dt", "2")
    assert json.loads(cli("--json", "namespaces", "get-subscription-dispatch-rate", ns)) == {
        "dispatchThrottlingRateInMsg": 100, "dispatchThrottlingRateInByte": -1, "relativeToPublishRate": False,
        "ratePeriodInSecond": 2}
    topic = f"persistent://{ns}/cli"
    admin.ok("PUT", rest_path(topic))
    cli("topics", "set-dispatch-rate", topic, "-bd", "1000")
    assert admin.ok("GET", rest_path(topic) + "/dispatchRate")["dispatchThrottlingRateInByte"] == 1000
    cli("topics", "remove-dispatch-rate", topic)
    cli("namespaces", "remove-publish-rate", ns)
    assert admin.get(f"/namespaces/{ns}/publishRate") == (204, None)
    assert admin.get(rest_path(topic) + "/dispatchRate") == (204, None)


def test_a_dispatch_rate_relative_to_the_publish_rate_lets_consumers_keep_up(admin, client):
    import time

    ns = _ns(admin)
    topic = f"persistent://{ns}/relative"
    admin.ok("PUT", rest_path(topic))
    # One message a second more than the topic's publish rate (PIP-52); alone, 60 messages would take a minute.
    admin.ok("POST", rest_path(topic) + "/dispatchRate", dict(DISPATCH, dispatchThrottlingRateInMsg=1,
                                                              relativeToPublishRate=True))
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        producer.send(b"r%d" % i)
    deadline, got = time.monotonic() + 30, []
    while len(got) < 60 and time.monotonic() < deadline:
        try:
            got.append(consumer.receive(timeout_millis=1000).data())
        except pulsar.Timeout:
            pass
    assert got == [b"r%d" % i for i in range(60)]
    consumer.close()
    producer.close()
