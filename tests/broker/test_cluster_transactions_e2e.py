"""Kafka transactions over `nereus standalone --brokers 3` with confluent-kafka: partitions of two
brokers, the group's offsets on another, commit and abort seen by read_committed consumers."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.raw import RawKafka
from tests.ports import port_run

NEREUS = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "standalone"]
BROKERS = 3
GROUP, TXN = 0, 1  # FindCoordinator key types


def _wait(condition, what: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"standalone exited early:\n{log.read_text()[-3000:]}")
        try:
            result = condition()
            if result:
                return result
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("txn-e2e")
    http, pulsar_port, kafka, oxia = (port_run(BROKERS) for _ in range(4))
    log = tmp / "standalone.log"
    args = ["--data-dir", str(tmp / "data"), "--brokers", str(BROKERS), "--compaction-interval", "0",
            "--http-port", str(http), "--pulsar-port", str(pulsar_port), "--kafka-port", str(kafka),
            "--oxia-port", str(oxia)]
    proc = subprocess.Popen(NEREUS + args, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    bootstrap = f"127.0.0.1:{kafka}"
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        _wait(lambda: len(admin.list_topics(timeout=5).brokers) == BROKERS, "three Kafka brokers", proc, log)
        yield bootstrap, admin
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def _coordinator(bootstrap: str, key: str, key_type: int) -> int:
    raw = RawKafka(bootstrap)
    try:
        answer = raw.request(10, 3, key=key, key_type=key_type)
    finally:
        raw.close()
    assert answer.error_code == 0, answer
    return answer.node_id


def _key_on(bootstrap: str, prefix: str, key_type: int, node: int) -> str:
    """A fresh group or transactional id whose coordinator is broker ``node``."""
    for _ in range(200):
        key = f"{prefix}-{uuid.uuid4().hex[:8]}"
        if _coordinator(bootstrap, key, key_type) == node:
            return key
    raise AssertionError(f"no {prefix} id lands on broker {node}")


def _group_offset(admin: AdminClient, group: str, topic: str) -> int:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])
    answer = admin.list_consumer_group_offsets([request])[group].result(10)
    return answer.topic_partitions[0].offset


def _read(bootstrap: str, topic: str, isolation: str, until: int, timeout: float = 30.0) -> list[str]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    consumer.subscribe([topic])
    out: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(out) < until:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg.value().decode())
    finally:
        consumer.close()
    return out


def _wait_for(condition, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_commit_and_abort_over_partitions_and_a_group_of_other_brokers(cluster):
    bootstrap, admin = cluster
    topic, source = f"xb-{uuid.uuid4().hex[:8]}", f"xs-{uuid.uuid4().hex[:8]}"
    for fut in admin.create_topics([NewTopic(topic, 6), NewTopic(source, 1)]).values():
        fut.result(30)
    leaders = _wait_for_leaders(admin, topic)
    (pa, a), (pb, b) = next(((pa, a), (pb, b)) for pa, a in leaders.items() for pb, b in leaders.items() if a != b)
    other = next(n for n in range(BROKERS) if n not in (a, b))
    # the transaction's coordinator owns neither partition; the group lives on yet another broker
    tid = _key_on(bootstrap, "tid", TXN, other)
    group = _key_on(bootstrap, "grp", GROUP, a)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 30000,
                         "linger.ms": 5})
    producer.init_transactions(30)
    group_meta = Consumer({"bootstrap.servers": bootstrap, "group.id": group}).consumer_group_metadata()

    def transaction(tag: str, offset: int | None, commit: bool, before: int = -1001) -> None:
        producer.begin_transaction()
        for i in range(2):
            producer.produce(topic, f"{tag}-a{i}".encode(), partition=pa)
            producer.produce(topic, f"{tag}-b{i}".encode(), partition=pb)
        producer.flush(10)
        if offset is not None:
            producer.send_offsets_to_transaction([TopicPartition(source, 0, offset)], group_meta, 30)
            assert _group_offset(admin, group, source) == before  # not visible before the outcome
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    transaction("one", 5, commit=True)
    _wait_for(lambda: _group_offset(admin, group, source) == 5, "the committed offset")
    transaction("two", 9, commit=False, before=5)
    transaction("three", None, commit=True)
    producer.flush(10)
    committed = sorted(f"{t}-{p}{i}" for t in ("one", "three") for p in "ab" for i in range(2))
    # "three" ends each partition: reading its records passed every aborted one
    assert sorted(_read(bootstrap, topic, "read_committed", until=len(committed))) == committed
    everything = _read(bootstrap, topic, "read_uncommitted", until=12)
    assert sorted(everything) == sorted(committed + [f"two-{p}{i}" for p in "ab" for i in range(2)])
    assert _group_offset(admin, group, source) == 5  # the aborted transaction's offset never appears


def _wait_for_leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    leaders: dict[int, int] = {}

    def known() -> bool:
        meta = admin.list_topics(topic, timeout=5).topics[topic]
        leaders.clear()
        leaders.update({p.id: p.leader for p in meta.partitions.values() if p.leader >= 0})
        return len(leaders) == 6 and len(set(leaders.values())) >= 2

    _wait_for(known, f"leaders of {topic} on two brokers")
    return leaders
