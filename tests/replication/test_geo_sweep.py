"""A replicated topic with a backlog that nobody loads still sends it.

Replicators run on loaded topics. Here nothing loads east's topic once it is unloaded
(or east restarted): its producer is gone, and west replicates nothing of the topic back
(its topic policy names west only), so no replicator of west's reaches for it either;
nor does any broker adopt it, as it would a dead owner's. Each broker's sweep finds the
topics of replicated namespaces whose replication cursor is behind and loads them;
east's replicator then sends the backlog.
"""

from __future__ import annotations

import json

import pulsar
import pytest

from nereus.ledger.policies import policies_key, tenant_key, topic_policies_key
from nereus.meta import connect
from nereus.pulsar.replication.sweep import replicated_namespaces, replicated_topics
from tests.ports import free_port
from tests.replication.geo import admin, clusters, replicate_namespace, stats
from tests.waiting import wait_until

NAMESPACE = "quiet/ns"


async def test_the_sweep_finds_the_namespaces_replicated_from_here():
    """Namespace records lie one level below their tenant's name, where a plain range over the
    policies' root does not reach (keys sort level by level)."""
    meta = connect("embedded://")
    try:
        for tenant in ("acme", "globex"):
            await meta.put(tenant_key(tenant), b"{}")
        for (tenant, namespace), clusters in {("acme", "geo"): ["east", "west", "north"],
                                               ("acme", "local"): ["east"], ("acme", "plain"): None,
                                               ("globex", "geo"): ["west", "east"]}.items():
            policies = {} if clusters is None else {"replication_clusters": clusters}
            await meta.put(policies_key(tenant, namespace), json.dumps(policies).encode())
        assert await replicated_namespaces(meta, "east") == {"acme/geo": ["west", "north"], "globex/geo": ["west"]}
    finally:
        await meta.close()


async def test_the_sweep_finds_the_topics_replicated_by_their_own_policy():
    meta = connect("embedded://")
    try:
        await meta.put(tenant_key("acme"), b"{}")
        await meta.put(policies_key("acme", "app"), b"{}")
        for local, clusters in {"orders": ["east", "west"], "audit": ["east"], "plain": None}.items():
            policies = {} if clusters is None else {"replicationClusters": clusters}
            await meta.put(topic_policies_key("acme", "app", local), json.dumps(policies).encode())
        assert await replicated_topics(meta, "east") == {"acme/app/orders": ["west"], "acme/app/audit": []}
    finally:
        await meta.close()


@pytest.fixture
def pair(tmp_path):
    with clusters(tmp_path, ["east", "west"]) as made:
        replicate_namespace(made, NAMESPACE)
        yield made


def left_with_a_backlog(east, west, topic: str, count: int) -> None:
    """``count`` messages published in east to ``topic`` while west is out of reach; west's copy of
    the topic replicates nothing back."""
    path = topic.split("://", 1)[1]
    admin(west.node, "PUT", f"/persistent/{path}")
    admin(west.node, "POST", f"/persistent/{path}/replication", ["west"])
    reachable = admin(east.node, "GET", "/clusters/west")
    admin(east.node, "POST", "/clusters/west", {**reachable, "brokerServiceUrl": f"pulsar://127.0.0.1:{free_port()}"})
    client = pulsar.Client(east.node.url)
    try:
        producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
        for i in range(count):
            producer.send_async(f"q-{i}".encode(), None)
        producer.flush()
    finally:
        client.close()
    wait_until(lambda: (r := stats(east.node, topic)["replication"].get("west")) and r["error"]
               and r["replicationBacklog"] == count, "east's replicator behind, west out of reach")
    admin(east.node, "POST", "/clusters/west", reachable)


def received_in_west(west, topic: str, count: int) -> list[bytes]:
    """What west's topic holds, once it holds ``count`` messages. Only west is asked: a stats call
    or a client at east would load east's topic."""
    client = pulsar.Client(west.node.url)
    try:
        consumer = client.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
        got = []

        def everything_arrived() -> bool:
            try:
                while len(got) < count:
                    message = consumer.receive(timeout_millis=1000)
                    consumer.acknowledge(message)
                    got.append(message.data())
            except pulsar.Timeout:
                return False
            return True

        wait_until(everything_arrived, f"{count} messages of east in west", timeout=120)
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=1000)
        return got
    finally:
        client.close()


def test_the_sweep_loads_an_unloaded_topic_whose_replication_is_behind(pair):
    east, west = pair
    topic = f"persistent://{NAMESPACE}/unloaded"
    left_with_a_backlog(east, west, topic, 100)
    admin(east.node, "PUT", f"/persistent/{topic.split('://', 1)[1]}/unload")
    assert received_in_west(west, topic, 100) == [f"q-{i}".encode() for i in range(100)]


def test_the_sweep_loads_a_lagging_topic_after_a_restart(pair):
    east, west = pair
    topic = f"persistent://{NAMESPACE}/restarted"
    left_with_a_backlog(east, west, topic, 100)
    east.node.stop()  # its topics handed over as it stops: no dead owner's topic to adopt
    east.node.start()
    assert received_in_west(west, topic, 100) == [f"q-{i}".encode() for i in range(100)]
