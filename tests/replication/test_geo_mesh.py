"""A full mesh of three clusters: each replicates to both others, and nothing goes round.

Every entry a replicator sends carries ``replicated_from``, and a replicator never sends
such an entry on: each message published in one cluster is stored once in each of the
three, whatever the order the replicators start in.
"""

from __future__ import annotations

import contextlib
import urllib.error

import pulsar
import pytest

from tests.replication.geo import admin, clusters, replicate_namespace, stats
from tests.waiting import wait_until

NAMESPACE = "mesh/ns"
PER_CLUSTER = 300


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    with clusters(tmp_path_factory.mktemp("mesh"), ["east", "west", "north"]) as made:
        replicate_namespace(made, NAMESPACE)
        clients = {c.name: pulsar.Client(c.node.url, operation_timeout_seconds=60) for c in made}
        try:
            yield made, clients
        finally:
            for client in clients.values():
                client.close()


def publish_everywhere(clients: dict[str, pulsar.Client], topic: str) -> None:
    """Each cluster publishes ``{cluster}-{i}``, the three at once: each cluster's topic interleaves
    its own messages with the two others' replicated ones."""
    producers = {name: client.create_producer(topic, batching_enabled=True, batching_max_messages=25,
                                              block_if_queue_full=True)
                 for name, client in clients.items()}
    for i in range(PER_CLUSTER):
        for name, producer in producers.items():
            producer.send_async(f"{name}-{i}".encode(), None, partition_key=f"k{i % 7}")
    for producer in producers.values():
        producer.flush()
        producer.close()


def read_everything(client: pulsar.Client, topic: str, count: int) -> list[tuple[str, bytes]]:
    """(partition, message) of what ``topic`` stores, read from its start by a subscription made now;
    then nothing more comes."""
    consumer = client.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
    got = []
    while len(got) < count:
        message = consumer.receive(timeout_millis=60_000)
        consumer.acknowledge(message)
        got.append((message.topic_name(), message.data()))
    try:
        extra = consumer.receive(timeout_millis=1000)
    except pulsar.Timeout:
        return got
    raise AssertionError(f"more than {count} messages in {topic}: {extra.data()!r}")


def check_every_cluster_stores_each_message_once(made, clients, topic: str, parts: list[str]) -> None:
    """``parts``: the topics holding the messages (the topic itself, or its partitions)."""
    total = PER_CLUSTER * len(made)

    def received(cluster) -> int:
        return sum(stats(cluster.node, part)["msgInCounter"] for part in parts)

    def caught_up(cluster) -> bool:
        for part in parts:
            replication = stats(cluster.node, part)["replication"]
            if len(replication) != len(made) - 1 or not all(
                    r["replicationBacklog"] == 0 and r["connected"] for r in replication.values()):
                return False
        return True

    for cluster in made:
        wait_until(lambda: received(cluster) >= total, f"{total} messages in {cluster.name}")
        wait_until(lambda: caught_up(cluster), f"{cluster.name}'s replicators caught up")
    for cluster in made:
        assert received(cluster) == total, cluster.name  # nothing came round a second time
        got = read_everything(clients[cluster.name], topic, total)
        assert sorted(m for _, m in got) == sorted(f"{name}-{i}".encode() for name in clients
                                                   for i in range(PER_CLUSTER))
        in_order: dict[tuple[str, str], list[int]] = {}  # (partition, source) -> numbers, as read
        for part, message in got:
            source, number = message.decode().rsplit("-", 1)
            in_order.setdefault((part, source), []).append(int(number))
        for where, numbers in in_order.items():  # each source's messages in the order it published them
            assert numbers == sorted(numbers), (cluster.name, where)


def test_three_clusters_in_a_full_mesh_store_every_message_once_in_each(mesh):
    made, clients = mesh
    topic = f"persistent://{NAMESPACE}/mesh"
    publish_everywhere(clients, topic)
    check_every_cluster_stores_each_message_once(made, clients, topic, [topic])


def test_a_partitioned_topic_made_in_one_cluster_is_made_in_both_others_and_meshed(mesh):
    made, clients = mesh
    east = made[0]
    topic = f"persistent://{NAMESPACE}/mesh-parted"
    path = topic.split("://", 1)[1]
    admin(east.node, "PUT", f"/persistent/{path}/partitions", 3)
    # East's replicators make it in west and north; those publish once it is there (a
    # producer would make a plain topic).
    clients["east"].create_producer(topic).close()

    def partitions(cluster) -> int:
        with contextlib.suppress(urllib.error.HTTPError):
            return admin(cluster.node, "GET", f"/persistent/{path}/partitions")["partitions"]
        return 0

    for cluster in made[1:]:
        wait_until(lambda: partitions(cluster) == 3, f"the partitioned topic made in {cluster.name}")
    publish_everywhere(clients, topic)
    check_every_cluster_stores_each_message_once(made, clients, topic, [f"{topic}-partition-{i}" for i in range(3)])
