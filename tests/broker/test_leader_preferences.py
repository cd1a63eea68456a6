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


def K(n: int) -> str:
    """A Kafka topic's partition that prefers node ``n``."""
    return f"{KAFKA_NAMESPACE}k-partition-{n}"


def T(i) -> str:
    """A Kafka topic's partition with no preference."""
    return f"{KAFKA_NAMESPACE}t{i}-partition-0"


@pytest.fixture
def reads(monkeypatch):
    """Topics whose preference was read from metadata, in order (``K(n)`` prefers node n)."""
    seen: list[str] = []

    async def preferred_leader(meta, topic: str):
        seen.append(topic)
        local = topic[len(KAFKA_NAMESPACE):]
        return int(local.rsplit("-", 1)[1]) if local.startswith("k-") else None

    monkeypatch.setattr(leader_preference, "preferred_leader", preferred_leader)
    return seen


def preferences(clock: Clock, max_recent: int = 3) -> LeaderPreferences:
    brokers = [SimpleNamespace(node_id=n, name=f"broker-{n}") for n in range(10)]
    return LeaderPreferences(None, SimpleNamespace(active=lambda: brokers), max_recent=max_recent, clock=clock)


async def test_readings_of_topics_not_claimed_are_bounded_and_expire(reads):
    clock = Clock()
    prefs = preferences(clock)
    for i in range(100):  # lookups of many topics owned elsewhere
        await prefs.load(T(i))
    assert len(prefs) == 3
    await prefs.load(K(7))
    assert prefs.broker(K(7)) == "broker-7"
    await prefs.load(K(7))
    assert reads.count(K(7)) == 1  # reused while recent
    clock.now += CACHE_SECONDS
    await prefs.load(T("x"))
    assert len(prefs) == 1  # the stale readings went
    await prefs.load(K(7))
    assert reads.count(K(7)) == 2


async def test_stale_readings_go_when_a_topic_is_released_though_no_lookup_comes(reads):
    clock = Clock()
    prefs = preferences(clock, max_recent=100)
    for i in range(50):  # lookups, then nothing more: no new reading would drop these
        await prefs.load(T(i))
    await prefs.hold(K(1))
    assert len(prefs) == 51
    clock.now += CACHE_SECONDS
    prefs.forget(K(1))  # an unload of this broker's topics
    assert len(prefs) == 0


async def test_claimed_topics_are_held_until_released(reads):
    clock = Clock()
    prefs = preferences(clock)
    await prefs.load(K(4))
    await prefs.hold(K(4))
    await prefs.hold(K(5))  # held without an earlier reading: read now
    assert reads == [K(4), K(5)]
    for i in range(50):
        await prefs.load(T(i))
    clock.now += 10 * CACHE_SECONDS
    await prefs.load(T("last"))
    assert (prefs.broker(K(4)), prefs.broker(K(5))) == ("broker-4", "broker-5")
    await prefs.load(K(4))
    assert reads.count(K(4)) == 1  # held: never read again while claimed
    prefs.forget(K(4))
    assert prefs.broker(K(4)) is None
    prefs.drop_held()
    assert prefs.broker(K(5)) is None
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


async def test_topics_no_client_can_assign_are_neither_read_nor_kept(reads):
    prefs = preferences(Clock())
    plain = ["persistent://tenant/ns/orders-partition-0", f"{KAFKA_NAMESPACE}orders", "non-persistent://t/n/x"]
    for topic in plain:
        await prefs.load(topic)
        await prefs.hold(topic)
    assert reads == [] and len(prefs) == 0 and prefs.broker(plain[0]) is None
