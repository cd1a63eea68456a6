"""The replicated WAL profile on a real cluster: owners killed (-9), a replica's WAL lost,
every broker restarted with entries not yet uploaded (a zombie's late writes: test_zombie).

Every broker keeps a WAL replica; writes go to 3 of them and are acknowledged at 2.
"""

from __future__ import annotations

import shutil

import pytest

from .clients import PUBLIC, PulsarLoad, assert_exactly_once, pulsar_client, read_all

REPLICATED = ["--wal-profile", "replicated", "--wal-ensemble", "3", "--wal-write-quorum", "3",
              "--wal-ack-quorum", "2", "--gc-interval", "1", "--gc-pending-timeout", "20"]


def _replicated_cluster(make_cluster, store: str = "file"):
    return make_cluster(["a", "b", "c"], store=store, wal=True, broker_args=REPLICATED)


def _load_then(cluster, topic: str, tag: str, act) -> None:
    """Produce under load, call ``act(owner)`` with the topic's owner, go on producing; then every
    acknowledged message is read back exactly once."""
    client = pulsar_client(cluster.service_url(), cluster.root, tag)
    try:
        load = PulsarLoad(client, topic, tag).start()
        load.wait_acked(300)
        owner = cluster.broker(cluster.owner(topic))
        before = load.acked_count
        act(owner)
        cluster.wait_for(lambda: (o := cluster.owner(topic)) not in (None, owner.name) and o, 60,
                         f"{topic} owned by a broker other than {owner.name}")
        load.wait_acked(before + 300, timeout=90)
        load.stop()
        assert not load.errors, load.errors[:5]
    finally:
        client.close()
    # Read through the brokers that answer (a SIGSTOPped one accepts connections and says nothing).
    reader = pulsar_client(cluster.service_url(*[b for b in cluster.running if not b.paused]), cluster.root,
                           f"{tag}-read")
    try:
        assert_exactly_once(read_all(reader, topic), load.acked, topic)
    finally:
        reader.close()


@pytest.mark.parametrize("store", ["file", "s3"])
def test_owner_killed_with_replicated_wal_loses_nothing_acknowledged(make_cluster, store):
    cluster = _replicated_cluster(make_cluster, store)
    _load_then(cluster, f"{PUBLIC}repl-kill-{store}", "rk", lambda owner: owner.kill())
    # Every broker's WAL took part: the writes went to three replicas.
    assert all(any(b.wal_dir.glob("*.wal")) for b in cluster.brokers_list)


def test_owner_killed_and_one_replica_wal_deleted_loses_nothing(make_cluster):
    cluster = _replicated_cluster(make_cluster)

    def kill_and_lose_a_replica(owner) -> None:
        owner.kill()
        other = next(b for b in cluster.brokers_list if b is not owner)
        other.kill()
        shutil.rmtree(other.wal_dir)  # its disk is gone: the third replica still has every entry
        other.launch()
        other.wait_ready()

    _load_then(cluster, f"{PUBLIC}repl-lost-disk", "rl", kill_and_lose_a_replica)


def test_whole_cluster_restarted_with_entries_not_uploaded_serves_them_all(make_cluster):
    """Every broker killed at once right after the acks; restarted, every message is there (from the
    replicas first, the object store once the collector uploaded them)."""
    cluster = _replicated_cluster(make_cluster, "s3")
    topic = f"{PUBLIC}repl-restart"
    client = pulsar_client(cluster.service_url(), cluster.root, "rr")
    try:
        load = PulsarLoad(client, topic, "rr").start()
        load.wait_acked(500)
        load.stop()
    finally:
        client.close()
    for broker in cluster.brokers_list:
        broker.kill()
    for broker in cluster.brokers_list:
        broker.launch()
    for broker in cluster.brokers_list:
        broker.wait_ready()
    client = pulsar_client(cluster.service_url(), cluster.root, "rr-after")
    try:
        assert_exactly_once(read_all(client, topic), load.acked, topic)
    finally:
        client.close()
    # The collector recovers the dead writers' blocks into the object store: none is left.
    dead = [f"{b.name}-{pid}" for b in cluster.brokers_list for pid in b.pids[:-1]]
    cluster.wait_for(lambda: not [m for m in cluster.pending_markers().values()
                                  if any(f"-{node}~" in m.get("prefix", "") for node in dead)],
                     120, "every block of the killed writers resolved")
