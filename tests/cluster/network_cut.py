"""Cutting one broker off from the metadata service while its clients still reach it, and a Kafka load.

The broker runs under a group id of its own (``CUT_GID``, by ``setpriv``); iptables rules
match its packets to the metadata port by that owner and, for a silent drop, the replies on
the same connections by their connection mark. Needs root, iptables and setpriv.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

#: The cut-off broker's group id: what the iptables owner match recognises its sockets by.
CUT_GID = 47391
CONNMARK = "0x4e43"


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


def read_kafka(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
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


def topics_owned_by(cluster, broker_name: str, client, want: int) -> list[str]:
    """Pulsar topics (new names) that ``broker_name`` owns, each with a first value written."""
    found = []
    for i in range(60):
        topic = f"persistent://public/default/cut-{i}"
        producer = client.create_producer(topic)
        producer.send(b"first")
        producer.close()
        if cluster.owner(topic) == broker_name:
            found.append(topic)
            if len(found) == want:
                return found
    raise AssertionError(f"{broker_name} owns too few topics: {cluster.owners()}")
