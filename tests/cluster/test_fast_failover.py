"""A dead owner's topics move at once, not when its metadata session expires; a stalled one keeps them.

The brokers here have a metadata session of a minute, so what moves does so because the
owner was seen dead (its listener refuses connections), not because its session expired:
the topic its clients use moves first, and then one no client uses, which the survivors
find among the dead broker's ownership records, well before its session expires.
"""

from __future__ import annotations

import json
import urllib.request

from .clients import PUBLIC, PulsarLoad, assert_exactly_once, pulsar_client, read_all

LONG_SESSION = 60.0


def two_topics_of_one_broker(cluster, client, prefix: str) -> tuple[str, str, str]:
    """Create topics until one broker owns two of them: (broker name, topic, other topic)."""
    by_owner: dict[str, list[str]] = {}
    for i in range(30):
        topic = f"{PUBLIC}{prefix}-{i}"
        producer = client.create_producer(topic)
        producer.send(b"created")
        producer.close()
        owner = cluster.wait_for(lambda t=topic: cluster.owner(t), 30, f"an owner of {topic}")
        by_owner.setdefault(owner, []).append(topic)
        if len(by_owner[owner]) == 2:
            return owner, *by_owner[owner]
    raise AssertionError(f"no broker owns two of 30 topics: {by_owner}")


def test_a_killed_owner_loses_its_topics_before_its_session_expires(make_cluster):
    cluster = make_cluster(["a", "b", "c"], session_timeout=LONG_SESSION)
    client = pulsar_client(cluster.service_url(), cluster.root, "fast-kill")
    try:
        victim, loaded, idle = two_topics_of_one_broker(cluster, client, "fast-kill")
        load = PulsarLoad(client, loaded, "k").start()
        load.wait_acked(100)
        cluster.broker(victim).kill()
        before = load.acked_count
        load.wait_acked(before + 100, timeout=LONG_SESSION / 2)
        assert cluster.owner(loaded) not in (None, victim)
        assert victim not in cluster.brokers()  # seen dead: out of the registry, so out of the ring
        # No client uses the other topic: a survivor adopts it from the dead broker's records.
        cluster.wait_for(lambda: cluster.owner(idle) not in (None, victim), LONG_SESSION / 2,
                         f"a survivor owning {idle} before the dead broker's session expired")
        load.stop()
        assert not load.errors, load.errors[:5]
        assert_exactly_once([v for v in read_all(client, loaded) if v != b"created"], load.acked, loaded)
    finally:
        client.close()


def test_a_stalled_owner_keeps_its_topics(make_cluster):
    cluster = make_cluster(["a", "b", "c"], session_timeout=LONG_SESSION)
    client = pulsar_client(cluster.service_url(), cluster.root, "stall")
    try:
        victim, topic, _ = two_topics_of_one_broker(cluster, client, "stall")
        owner = cluster.broker(victim)
        others = [b for b in cluster.running if b.name != victim]
        path = topic.replace("persistent://", "persistent/")
        owner.pause()  # SIGSTOP: its listener still accepts connections (the kernel does)
        try:
            for broker in others:
                with urllib.request.urlopen(f"{broker.http_url}/lookup/v2/topic/{path}", timeout=30) as answer:
                    assert json.load(answer)["brokerUrl"] == owner.pulsar_url
            assert cluster.owner(topic) == victim and victim in cluster.brokers()
        finally:
            owner.resume()
        producer = client.create_producer(topic)
        producer.send(b"after the stall")
        producer.close()
        assert cluster.owner(topic) == victim
    finally:
        client.close()
