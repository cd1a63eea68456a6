"""Rate policies changed through one broker apply at once on the broker owning the topic
(through the metadata plane's notifications), not only when the topic loads again."""

from __future__ import annotations

import pytest
import requests

from tests.pulsar_admin.conftest import wait_until

from .cluster_harness import Cluster, rest

PUBLISH = {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1}
DISPATCH = {"dispatchThrottlingRateInMsg": 7, "dispatchThrottlingRateInByte": -1, "relativeToPublishRate": True,
            "ratePeriodInSecond": 1}


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(2).start()
    yield cluster
    cluster.stop()


def _loaded(cluster: Cluster, broker: int, topic: str):
    return next((t for t in cluster.nodes[broker].registry.topics.values() if str(t.name) == topic), None)


def test_a_policy_set_through_another_broker_applies_on_the_owner(cluster):
    pulsar = pytest.importorskip("pulsar")
    topic = cluster.topic_for(1, "rated")
    namespace = "public/default"
    client = pulsar.Client(cluster.nodes[0].address.pulsar_url, operation_timeout_seconds=20,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic)  # loads it on its owner, broker 1
        producer.send(b"before")
        loaded = wait_until(lambda: _loaded(cluster, 1, topic), 20, 0.05)
        assert loaded.publish_limit is None and _loaded(cluster, 0, topic) is None

        admin = f"{cluster.http(0)}/admin/v2"  # broker 0 does not own the topic
        response = requests.post(f"{admin}/namespaces/{namespace}/publishRate", json=PUBLISH, timeout=20)
        assert response.status_code == 204, response.text
        wait_until(lambda: loaded.rate_policies["publish"] == PUBLISH, 20, 0.05)
        assert loaded.publish_limit is not None and loaded.publish_limit.messages.rate == 5

        response = requests.post(f"{admin}/persistent/{rest(topic)[len('persistent/'):]}/dispatchRate",
                                 json=DISPATCH, timeout=20)
        assert response.status_code == 204, response.text
        wait_until(lambda: loaded.rate_policies["dispatch"] == DISPATCH, 20, 0.05)

        requests.delete(f"{admin}/namespaces/{namespace}/publishRate", timeout=20).raise_for_status()
        wait_until(lambda: loaded.publish_limit is None, 20, 0.05)
        producer.send(b"after")  # the topic was not reloaded: the same producer carries on
        assert _loaded(cluster, 1, topic) is loaded
    finally:
        client.close()
