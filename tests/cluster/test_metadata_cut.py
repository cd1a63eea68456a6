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
import subprocess
import threading
import time
from collections import Counter

import pytest

from .clients import PUBLIC, PulsarLoad, assert_exactly_once, pulsar_client, read_all

#: The cut-off broker's group id: what the iptables owner match recognises its sockets by.
CUT_GID = 47391
CONNMARK = "0x4e43"
#: Seconds from the cut within which the others serve the cut-off broker's topics again (see the test).
LET_GO = 30.0

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("iptables") and shutil.which("setpriv")),
                                reason="cutting one process's traffic needs root, iptables and setpriv")


class MetadataCut:
    """iptables chains cutting group ``CUT_GID``'s TCP traffic to and from ``port``; removed by ``heal``."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.out_chain, self.in_chain = f"NEREUS_CUT_OUT_{os.getpid()}", f"NEREUS_CUT_IN_{os.getpid()}"
        self.active = False

    @staticmethod
    def _iptables(*args: str, check: bool = True) -> None:
        subprocess.run(["iptables", "-w", *args], check=check, capture_output=True, timeout=30)

    def cut(self, mode: str) -> None:
        port, owner = str(self.port), ["-m", "owner", "--gid-owner", str(CUT_GID)]
        for chain in (self.out_chain, self.in_chain):
            self._iptables("-N", chain)
        if mode == "drop":
            self._iptables("-A", self.out_chain, "-p", "tcp", "--dport", port, *owner,
                           "-j", "CONNMARK", "--set-mark", CONNMARK)
            self._iptables("-A", self.out_chain, "-p", "tcp", "--dport", port, *owner, "-j", "DROP")
            self._iptables("-A", self.in_chain, "-p", "tcp", "--sport", port, "-m", "connmark", "--mark", CONNMARK,
                           "-j", "DROP")
        else:
            self._iptables("-A", self.out_chain, "-p", "tcp", "--dport", port, *owner,
                           "-j", "REJECT", "--reject-with", "tcp-reset")
        self._iptables("-I", "OUTPUT", "-j", self.out_chain)
        self._iptables("-I", "INPUT", "-j", self.in_chain)
        self.active = True

    def heal(self) -> None:
        for hook, chain in (("OUTPUT", self.out_chain), ("INPUT", self.in_chain)):
            self._iptables("-D", hook, "-j", chain, check=False)
            self._iptables("-F", chain, check=False)
            self._iptables("-X", chain, check=False)
        self.active = False


class KafkaLoad:
    """An idempotent confluent-kafka producer writing unique values round-robin over a topic's partitions."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from confluent_kafka import Producer

        self.topic, self.partitions = topic, partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                  "message.timeout.ms": 300_000, "retry.backoff.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.lock = threading.Lock()
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafka-load", daemon=True)

    def start(self) -> "KafkaLoad":
        self._thread.start()
        return self

    def _delivered(self, err, msg) -> None:
        with self.lock:
            if err is None:
                self.acked[msg.partition()].append(msg.value())
            else:
                self.errors.append(str(err))

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            partition = seq % self.partitions
            try:
                self.producer.produce(self.topic, f"kv-{seq:08d}".encode(), partition=partition,
                                      on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.1)
                continue
            seq += 1
            self.producer.poll(0)
            time.sleep(0.004)

    def acked_on(self, partition: int) -> int:
        with self.lock:
            return len(self.acked[partition])

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        assert self.producer.flush(300) == 0, "Kafka values still undelivered"


def _read_kafka(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 120
    try:
        while sum(len(v) for v in got.values()) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error() is None:
                    got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def _topics_owned_by(cluster, broker_name: str, client, want: int) -> list[str]:
    """Pulsar topics (new names) that ``broker_name`` owns, each with a first value written."""
    found = []
    for i in range(60):
        topic = f"{PUBLIC}cut-{i}"
        producer = client.create_producer(topic)
        producer.send(b"first")
        producer.close()
        if cluster.owner(topic) == broker_name:
            found.append(topic)
            if len(found) == want:
                return found
    raise AssertionError(f"{broker_name} owns too few topics: {cluster.owners()}")


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
        topics = _topics_owned_by(cluster, victim.name, client, 2)
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
        stored = _read_kafka(cluster.bootstrap(), kafka_topic, partitions, expected)
        for p in range(partitions):
            counts = Counter(stored[p])
            assert not [v for v, c in counts.items() if c > 1], f"partition {p}: values stored twice"
            assert set(kafka.acked[p]) <= counts.keys(), f"partition {p}: acknowledged values lost"
    finally:
        if network.active:
            network.heal()
        client.close()
