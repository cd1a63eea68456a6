"""A frozen owner (SIGSTOP past its session timeout) is a zombie: fenced, it commits nothing when it wakes."""

from __future__ import annotations

import time

import pytest

from .clients import PUBLIC, PulsarLoad, assert_exactly_once, pulsar_client, read_all
from .harness import object_node
from .test_replicated_wal import REPLICATED


@pytest.mark.parametrize("profile", ["object", "replicated"])
def test_zombie_owner_commits_nothing_after_its_session_expired(make_cluster, profile):
    """With the replicated WAL profile the zombie's WAL block is fenced on its replicas too."""
    if profile == "replicated":
        cluster = make_cluster(["a", "a", "b"], wal=True, broker_args=REPLICATED)
    else:
        cluster = make_cluster(["a", "a", "b"])
    topic = f"{PUBLIC}zombie-{profile}"
    client = pulsar_client(cluster.service_url(), cluster.root, "zombie")
    try:
        load = PulsarLoad(client, topic, "z").start()
        load.wait_acked(300)

        zombie = cluster.broker(cluster.owner(topic))
        zombie_node = zombie.node_id
        incarnation = cluster.brokers()[zombie.name]["incarnation"]
        paused_at = time.time()
        zombie.pause()

        # Its session expires and another broker adopts the topic, which serves while the zombie sleeps.
        successor = cluster.wait_for(lambda: (o := cluster.owner(topic)) not in (None, zombie.name) and o,
                                     60, f"{topic} adopted after {zombie.name} froze")
        others = [b for b in cluster.brokers_list if b is not zombie]
        during = pulsar_client(cluster.service_url(*others), cluster.root, "during")
        try:
            producer = during.create_producer(topic, producer_name="during", batching_enabled=False)
            during_acked = [f"during-{i}".encode() for i in range(50)]
            for value in during_acked:
                producer.send(value)
            producer.close()
        finally:
            during.close()

        # The zombie wakes with the load producer's sends still in its socket: they must not commit.
        resumed_at = time.time()
        zombie.resume()
        load.wait_progress(300, timeout=120)
        cluster.wait_for(lambda: cluster.brokers().get(zombie.name, {}).get("incarnation") not in (None, incarnation),
                         60, f"{zombie.name} registered again as a new incarnation")
        load.wait_progress(100, timeout=60)
        load.stop()
        assert not load.errors, load.errors[:5]

        assert_exactly_once(read_all(client, topic), [*load.acked, *during_acked], topic)
    finally:
        client.close()

    entries = cluster.index_entries(topic)
    wal = cluster.wal_objects()
    nodes = [object_node(e.object) for e in entries]
    successor_node = cluster.broker(successor).node_id
    assert successor_node in nodes, f"nothing committed by the successor {successor_node}: {sorted(set(nodes))}"
    first_s = nodes.index(successor_node)
    last_s = len(nodes) - 1 - nodes[::-1].index(successor_node)
    # Before the successor took the stream: the zombie's commits all happened before it froze.
    # (An object's write time says when it was committed on the object store only: on WAL replicas
    # its upload comes later, by the collector's recovery for a frozen writer.)
    late = [(e.object, e.base, e.timestamp) for e, n in zip(entries[:first_s], nodes[:first_s])
            if n == zombie_node and (e.timestamp > paused_at * 1000
                                     or (profile == "object" and wal.get(e.object, 0) > paused_at + 0.01))]
    assert not late, f"commits of the zombie after it froze at {paused_at:.3f}: {late[:5]}"
    # While the successor held the stream: nothing of the zombie's in between.
    between = [(e.object, e.base) for e, n in zip(entries[first_s:last_s + 1], nodes[first_s:last_s + 1])
               if n == zombie_node]
    assert not between, f"zombie commits interleaved with the successor's: {between[:5]}"
    # After: only once the broker, awake and registered again, took the stream back with a new session.
    after = [e for e, n in zip(entries[last_s + 1:], nodes[last_s + 1:]) if n == zombie_node]
    assert all(e.timestamp >= entries[last_s].timestamp for e in after)
    # Offsets are dense: the entries tile the stream with no gap or overlap.
    expected = 0
    for e in entries:
        assert e.base == expected, f"index entries leave a gap or overlap at {expected}: {e}"
        expected = e.base + e.records
    print(f"froze {zombie.name} {paused_at:.1f}, adopted by {successor}, woke {resumed_at:.1f}; "
          f"{nodes.count(zombie_node)} zombie-node slices ({len(after)} after it took the stream back), "
          f"{nodes.count(successor_node)} successor slices")
