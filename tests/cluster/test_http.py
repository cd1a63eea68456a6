"""The HTTP side of a cluster: Pulsar's HTTP lookup and the admin API's view of the brokers, on any broker."""

from __future__ import annotations

import json
import urllib.request


from .clients import PUBLIC, pulsar_client, read_all


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:  # follows the 307 to the ring's broker
        return json.loads(response.read())


def test_http_lookup_and_brokers_on_any_broker(make_cluster):
    cluster = make_cluster(["a", "a", "b"])
    brokers = cluster.brokers_list
    by_url = {b.pulsar_url: b.name for b in brokers}
    topics = [f"http-{i}" for i in range(9)]

    # Nobody owns these yet: any broker's lookup sends the client to the one the ring names, which takes it.
    for i, topic in enumerate(topics):
        entry = brokers[i % len(brokers)]
        data = _get(f"{entry.http_url}/lookup/v2/topic/persistent/public/default/{topic}")
        owner = cluster.owner(PUBLIC + topic)
        assert owner is not None and by_url[data["brokerUrl"]] == owner, (topic, data, owner)
    assert len({cluster.owner(PUBLIC + t) for t in topics}) > 1, cluster.owners()

    # Every broker gives the same answer for every topic: its owner.
    for broker in brokers:
        for topic in topics:
            data = _get(f"{broker.http_url}/lookup/v2/topic/persistent/public/default/{topic}")
            assert by_url[data["brokerUrl"]] == cluster.owner(PUBLIC + topic)

    # A Pulsar client given one broker's http:// URL produces to and reads every topic.
    client = pulsar_client(brokers[0].http_url, cluster.root, "http")
    try:
        for topic in topics:
            producer = client.create_producer(PUBLIC + topic)
            producer.send(b"over-http")
            producer.close()
            assert read_all(client, PUBLIC + topic) == [b"over-http"]
    finally:
        client.close()

    # The admin API lists the cluster's brokers on any of them.
    for broker in brokers:
        clusters = _get(f"{broker.http_url}/admin/v2/clusters")
        assert len(clusters) == 1
        listed = _get(f"{broker.http_url}/admin/v2/brokers/{clusters[0]}")
        assert len(listed) == 3, listed
        ports = {str(b.ports["http"]) for b in brokers}
        assert {item.rsplit(":", 1)[-1] for item in listed} == ports, (listed, ports)
