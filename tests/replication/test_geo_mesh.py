"""A full mesh of three clusters: each replicates to both others, and nothing goes round.

Every entry a replicator sends carries ``replicated_from``, and a replicator never sends
such an entry on: each message published in one cluster is stored once in each of the
three, whatever the order the replicators start in.
"""

from __future__ import annotations

import pulsar

from tests.replication.geo import clusters, replicate_namespace, stats
from tests.waiting import wait_until

NAMESPACE = "mesh/ns"
PER_CLUSTER = 300


def read_everything(client: pulsar.Client, topic: str, count: int) -> list[bytes]:
    """What ``topic`` stores, read from its start by a subscription made now; then nothing more comes."""
    consumer = client.subscribe(topic, "audit", initial_position=pulsar.InitialPosition.Earliest)
    got = []
    while len(got) < count:
        message = consumer.receive(timeout_millis=60_000)
        consumer.acknowledge(message)
        got.append(message.data())
    try:
        extra = consumer.receive(timeout_millis=1000)
    except pulsar.Timeout:
        return got
    raise AssertionError(f"more than {count} messages in {topic}: {extra.data()!r}")


def test_three_clusters_in_a_full_mesh_store_every_message_once_in_each(tmp_path):
    with clusters(tmp_path, ["east", "west", "north"]) as made:
        replicate_namespace(made, NAMESPACE)
        topic = f"persistent://{NAMESPACE}/mesh"
        clients = {c.name: pulsar.Client(c.node.url, operation_timeout_seconds=60) for c in made}
        try:
            producers = {name: client.create_producer(topic, batching_enabled=True, batching_max_messages=25,
                                                      block_if_queue_full=True)
                         for name, client in clients.items()}
            # The three publish at once, so each cluster's topic interleaves its own messages
            # with the two others' replicated ones.
            for i in range(PER_CLUSTER):
                for name, producer in producers.items():
                    producer.send_async(f"{name}-{i}".encode(), None)
            for producer in producers.values():
                producer.flush()
            total = PER_CLUSTER * len(made)

            def caught_up(cluster) -> bool:
                replication = stats(cluster.node, topic)["replication"]
                return (len(replication) == len(made) - 1
                        and all(r["replicationBacklog"] == 0 and r["connected"] for r in replication.values()))

            for cluster in made:
                wait_until(lambda: stats(cluster.node, topic)["msgInCounter"] >= total,
                           f"{total} messages in {cluster.name}")
                wait_until(lambda: caught_up(cluster), f"{cluster.name}'s replicators caught up")
            for cluster in made:
                assert stats(cluster.node, topic)["msgInCounter"] == total, cluster.name
                got = read_everything(clients[cluster.name], topic, total)
                assert sorted(got) == sorted(f"{name}-{i}".encode() for name in clients for i in range(PER_CLUSTER))
                for source in clients:  # each source's messages in the order it published them
                    from_source = [m for m in got if m.startswith(f"{source}-".encode())]
                    assert from_source == [f"{source}-{i}".encode() for i in range(PER_CLUSTER)], \
                        (cluster.name, source)
        finally:
            for client in clients.values():
                client.close()
