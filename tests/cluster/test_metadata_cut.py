"""A broker cut off from the metadata service while its clients still reach it.

One broker of three runs under a group id of its own; iptables rules match its packets
to the metadata port by that owner (and, for a silent drop, the replies on the same
connections by their connection mark), so only its metadata traffic is cut, not its
clients'. The cut is held until the cut-off broker's topics are served again by the
others: a broker that kept its clients until the cut healed would never get there.
Then the cut heals, the broker registers again and takes topics back, and everything
acknowledged reads back exactly once. Both ways a cut looks: packets dropped silently,
and connections reset.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter

import pytest

from .clients import PUBLIC, PulsarLoad, assert_exactly_once, pulsar_client, read_all
from .network_cut import CUT_GID, KafkaLoad, MetadataCut, read_kafka, topics_owned_by

#: Seconds from the cut within which the others serve the cut-off broker's topics again (see the test).
LET_GO = 30.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("iptables") and shutil.which("setpriv")),
                                reason="cutting one process's traffic needs root, iptables and setpriv")


def test_a_broker_cut_off_from_metadata_lets_its_topics_go_and_takes_them_back_after_the_heal(make_cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(["a", "a", "a"])
    victim = cluster.brokers_list[2]
    victim.group = CUT_GID
    cluster.restart(victim)
    cluster.wait_ring_settled()
    others = [b.name for b in cluster.brokers_list if b is not victim]
    network = MetadataCut(cluster.oxia_port)
    client = pulsar_client(cluster.service_url(), cluster.root, "cut")
    kafka_topic, partitions = "kcut", 6
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(kafka_topic, partitions, 1)], operation_timeout=30)[kafka_topic].result(timeout=60)
    try:
        topics = topics_owned_by(cluster, victim.name, client, 2)
        loads = [PulsarLoad(client, topic, f"p{i}").start() for i, topic in enumerate(topics)]
        kafka = KafkaLoad(cluster.bootstrap(), kafka_topic, partitions).start()
        for load in loads:
            load.wait_acked(100)
        cluster.wait_for(lambda: all(kafka.acked_on(p) >= 20 for p in range(partitions)), 60, "Kafka values acked")

        for mode in ("drop", "reset"):
            victims = [f"{PUBLIC}{kafka_topic}-partition-{p}" for p in range(partitions)]
            victim_partitions = [p for p, stream in enumerate(victims) if cluster.owner(stream) == victim.name]
            before = {load.tag: load.acked_count for load in loads}
            kafka_before = {p: kafka.acked_on(p) for p in range(partitions)}
            network.cut(mode)
            cut_at = time.monotonic()
            # Held until the others serve every topic: the cut never heals on its own here. The
            # clients' own timeouts (60 s operations, 300 s messages) would move them on eventually
            # even from a broker that held on to them: only a broker that lets go gets them there
            # within half of that.
            def left() -> float:
                return max(0.1, cut_at + LET_GO - time.monotonic())

            cluster.wait_for(lambda: all(cluster.owner(t) in others for t in topics), left(),
                             f"{mode}: the cut-off broker's Pulsar topics owned by the others")
            for load in loads:
                load.wait_acked(before[load.tag] + 50, timeout=left())
            pulsar_back = time.monotonic() - cut_at
            cluster.wait_for(lambda: all(kafka.acked_on(p) >= kafka_before[p] + 20 for p in victim_partitions),
                             left(), f"{mode}: Kafka values acked again on the cut-off broker's partitions "
                             f"{victim_partitions}")
            kafka_back = time.monotonic() - cut_at
            assert "metadata session lost" in victim.log.read_text(errors="replace")
            print(f"{mode}: Pulsar produced again {pulsar_back:.1f} s and Kafka {kafka_back:.1f} s after the cut "
                  f"(session timeout {cluster.session_timeout:g} s)")

            network.heal()
            cluster.wait_ring_settled(90)  # registered again, as a new incarnation
            before = {load.tag: load.acked_count for load in loads}
            for load in loads:
                load.wait_acked(before[load.tag] + 50, timeout=90)
            cluster.wait_for(lambda: len({o for o in cluster.owners().values()} & {victim.name}) == 1, 90,
                             "the healed broker owns topics again")

        for load in loads:
            load.stop()
            assert not load.errors, load.errors[:5]
            assert_exactly_once(read_all(client, load.topic), load.acked, load.topic)
        kafka.stop()
        assert not kafka.errors, kafka.errors[:5]
        expected = sum(len(v) for v in kafka.acked.values())
        stored = read_kafka(cluster.bootstrap(), kafka_topic, partitions, expected)
        for p in range(partitions):
            counts = Counter(stored[p])
            assert not [v for v, c in counts.items() if c > 1], f"partition {p}: values stored twice"
            assert set(kafka.acked[p]) <= counts.keys(), f"partition {p}: acknowledged values lost"
    finally:
        if network.active:
            network.heal()
        client.close()
