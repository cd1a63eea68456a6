"""Preferred leaders are cached per topic: held while claimed here, bounded and short-lived otherwise."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from nereus.broker.cluster import leader_preference
from nereus.broker.cluster.leader_preference import CACHE_SECONDS, LeaderPreferences
from nereus.meta import open_engine
from nereus.topics.topic_configs import KAFKA_NAMESPACE, assign_replicas, topic_configs_key


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def reads(monkeypatch):
    """Topics whose preference was read from metadata, in order; topic ``k-<n>`` prefers node n."""
    seen: list[str] = []

    async def preferred_leader(meta, topic: str):
        seen.append(topic)
        return int(topic.rsplit("-", 1)[1]) if topic.startswith("k-") else None

    monkeypatch.setattr(leader_preference, "preferred_leader", preferred_leader)
    return seen


def preferences(clock: Clock, max_recent: int = 3) -> LeaderPreferences:
    brokers = [SimpleNamespace(node_id=n, name=f"broker-{n}") for n in range(10)]
    return LeaderPreferences(None, SimpleNamespace(active=lambda: brokers), max_recent=max_recent, clock=clock)


async def test_readings_of_topics_not_claimed_are_bounded_and_expire(reads):
    clock = Clock()
    prefs = preferences(clock)
    for i in range(100):  # lookups of many topics owned elsewhere
        await prefs.load(f"t-{i}")
    assert len(prefs) == 3
    await prefs.load("k-7")
    assert prefs.broker("k-7") == "broker-7"
    await prefs.load("k-7")
    assert reads.count("k-7") == 1  # reused while recent
    clock.now += CACHE_SECONDS
    await prefs.load("t-x")
    assert len(prefs) == 1  # the stale readings went
    await prefs.load("k-7")
    assert reads.count("k-7") == 2


async def test_claimed_topics_are_held_until_released(reads):
    clock = Clock()
    prefs = preferences(clock)
    await prefs.load("k-4")
    await prefs.hold("k-4")
    await prefs.hold("k-5")  # held without an earlier reading: read now
    assert reads == ["k-4", "k-5"]
    for i in range(50):
        await prefs.load(f"t-{i}")
    clock.now += 10 * CACHE_SECONDS
    await prefs.load("t-last")
    assert (prefs.broker("k-4"), prefs.broker("k-5")) == ("broker-4", "broker-5")
    await prefs.load("k-4")
    assert reads.count("k-4") == 1  # held: never read again while claimed
    prefs.forget("k-4")
    assert prefs.broker("k-4") is None
    prefs.drop_held()
    assert prefs.broker("k-5") is None
    assert len(prefs) == 1


async def test_many_preferences_are_read_together_once_per_topic_record():
    engine = open_engine(None, shards=2)
    meta = engine.client(namespace="default")
    try:
        await assign_replicas(meta, "orders", {0: [3, 1], 1: [1, 3], 2: [9]})
        gets = []
        real_get_many = meta.get_many

        async def get_many(keys, **kwargs):
            gets.append(list(keys))
            return await real_get_many(keys, **kwargs)

        meta.get_many = get_many
        clock = Clock()
        prefs = preferences(clock, max_recent=100)
        prefs.membership = SimpleNamespace(active=lambda: [SimpleNamespace(node_id=n, name=f"broker-{n}") for n in (1, 3)])
        topics = [KAFKA_NAMESPACE + "orders-partition-0", KAFKA_NAMESPACE + "orders-partition-1",
                  KAFKA_NAMESPACE + "orders-partition-2", KAFKA_NAMESPACE + "plain-partition-0",
                  "persistent://tenant/ns/not-kafka-partition-0", KAFKA_NAMESPACE + "orders"]
        prefs.meta = meta
        # node 9 is not active: no preference; topics without an assignment have none
        assert await prefs.brokers(topics) == ["broker-3", "broker-1", None, None, None, None]
        assert gets == [[topic_configs_key("orders"), topic_configs_key("plain")]]
        assert await prefs.brokers(topics[:2]) == ["broker-3", "broker-1"]
        assert len(gets) == 1  # recent readings are reused
        assert prefs.broker(topics[0]) == "broker-3"
    finally:
        await meta.close()
        await engine.close()
