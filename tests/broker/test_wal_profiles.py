"""WAL profiles on a real standalone: the local profile (this broker's disk in front of the
object store) through kill -9 with nothing uploaded, and namespace persistence policies."""

from __future__ import annotations

import json
import re
import shutil
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pulsar
import pytest
from click.testing import CliRunner

from nereus.cli import main
from tests.delayed_s3 import DelayedS3
from tests.standalone_process import Standalone, admin, running
from tests.waiting import wait_until

FAST_GC = ["--compaction-interval", "0", "--gc-interval", "1", "--gc-pending-timeout", "20"]


def _client(node: Standalone) -> pulsar.Client:
    return pulsar.Client(node.url, operation_timeout_seconds=30, connection_timeout_ms=5000,
                         logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def _metric(node: Standalone, name: str) -> float:
    found = re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", node.metrics(), re.M)
    return sum(float(v) for v in found)


def _read(client: pulsar.Client, topic: str, count: int) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        return [reader.read_next(30_000).data() for _ in range(count)]
    finally:
        reader.close()


def _consume(node: Standalone, topic: str, count: int) -> list[bytes]:
    """The first ``count`` records of a one-partition Kafka topic, read with confluent-kafka."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "g", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = []
    try:
        while len(got) < count:
            message = consumer.poll(30)
            assert message is not None, f"only {len(got)} of {count} Kafka records came back"
            if not message.error():
                got.append(message.value())
    finally:
        consumer.close()
    return got


def test_local_profile_keeps_acknowledged_writes_through_kill_9_while_the_store_is_down(tmp_path: Path):
    """Acks come from the local WAL while the object store refuses every write; killed, restarted,
    the broker serves every acknowledged message (Pulsar and Kafka) from its WAL, then uploads them."""
    from confluent_kafka import Producer

    with DelayedS3(tmp_path / "s3", latency_scale=0) as s3:
        node = Standalone(tmp_path / "data", [*FAST_GC, "--wal-profile", "local",
                                              "--object-store", s3.store_url("local-wal")])
        node.start()
        try:
            s3.outage(True)
            client = _client(node)
            producer = client.create_producer("persistent://public/default/local-wal", batching_enabled=False)
            sent = [f"p-{i}".encode() for i in range(200)]
            for value in sent:
                producer.send(value)
            client.close()
            kafka = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 0})
            delivered = []
            for i in range(100):
                kafka.produce("local-wal-k", f"k-{i}".encode(),
                              on_delivery=lambda err, msg: delivered.append(err is None and msg.value()))
            assert kafka.flush(60) == 0
            assert delivered == [f"k-{i}".encode() for i in range(100)]
            assert _metric(node, "nereus_storage_wal_upload_lag_bytes") > 0  # nothing reached the store
            node.kill()
            s3.outage(False)
            node.start()

            client = _client(node)
            try:
                assert _read(client, "persistent://public/default/local-wal", 200) == sent
            finally:
                client.close()
            assert _consume(node, "local-wal-k", 100) == [f"k-{i}".encode() for i in range(100)]
            assert _metric(node, "nereus_storage_wal_replica_reads_total") > 0  # served from the WAL
            # The collector takes the dead incarnation's blocks and uploads them: the WAL empties.
            wait_until(lambda: _metric(node, "nereus_wal_held_entries") == 0, "the WAL uploaded and dropped",
                       timeout=120)
        finally:
            node.kill()


def test_namespace_persistence_policy(tmp_path: Path):
    """Pulsar's persistence REST and the admin verbs; a policy sends a namespace's writes to the WAL."""
    with running(tmp_path / "data") as node:
        base = f"{node.http}/admin/v2/namespaces/public/default/persistence"
        with urllib.request.urlopen(base, timeout=10) as response:
            assert response.status == 204  # unset
        with pytest.raises(urllib.error.HTTPError) as bad:
            admin(node, "POST", "/namespaces/public/default/persistence",
                  {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 2, "bookkeeperAckQuorum": 1})
        assert bad.value.code == 400 and b"WriteQuorum" in bad.value.read()
        with pytest.raises(urllib.error.HTTPError) as bad:
            admin(node, "POST", "/namespaces/public/default/persistence",
                  {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1,
                   "walProfile": "disk"})
        assert bad.value.code == 400

        runner = CliRunner()
        cli = ["admin", "--url", node.http, "namespaces"]
        result = runner.invoke(main, [*cli, "set-persistence", "public/default", "-e", "1", "-w", "1", "-a", "1",
                                      "-p", "local"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        result = runner.invoke(main, [*cli, "get-persistence", "public/default", "--json"], catch_exceptions=False)
        assert json.loads(result.stdout) == {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1,
                                             "bookkeeperAckQuorum": 1, "managedLedgerMaxMarkDeleteRate": 0.0,
                                             "walProfile": "local"}

        topic = f"persistent://public/default/persist-{uuid.uuid4().hex[:8]}"
        client = _client(node)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(20):
                producer.send(b"m%d" % i)
            wal = node.data_dir / "wal"
            assert any(wal.glob("*.wal")), "the namespace's writes did not go to the local WAL"
            assert _read(client, topic, 20) == [b"m%d" % i for i in range(20)]
        finally:
            client.close()
        result = runner.invoke(main, [*cli, "remove-persistence", "public/default"], catch_exceptions=False)
        assert result.exit_code == 0
        assert "not set" in runner.invoke(main, [*cli, "get-persistence", "public/default"]).stdout

        # A topic's own policy wins over its namespace's (none now: the broker's object profile).
        topics_cli = ["admin", "--url", node.http, "topics"]
        other = f"persistent://public/default/topic-persist-{uuid.uuid4().hex[:8]}"
        client = _client(node)
        try:
            client.create_producer(other).send(b"before")
            applied = runner.invoke(main, [*topics_cli, "get-persistence", other, "--applied", "--json"])
            assert json.loads(applied.stdout)["walProfile"] == "object"
            result = runner.invoke(main, [*topics_cli, "set-persistence", other, "-e", "1", "-w", "1", "-a", "1",
                                          "-p", "local"], catch_exceptions=False)
            assert result.exit_code == 0, result.output
            stats = json.loads(urllib.request.urlopen(
                f"{node.http}/admin/v2/{other.replace('://', '/')}/stats", timeout=10).read())
            assert stats["walProfile"] == "local"  # the loaded topic switched at once
            client.create_producer(other).send(b"after")
            assert _read(client, other, 2) == [b"before", b"after"]
        finally:
            client.close()
        assert runner.invoke(main, [*topics_cli, "remove-persistence", other]).exit_code == 0
        assert "not set" in runner.invoke(main, [*topics_cli, "get-persistence", other]).stdout


def test_topic_stats_and_the_console_show_the_wal_profile(tmp_path: Path):
    with running(tmp_path / "data", ["--compaction-interval", "0", "--wal-profile", "local"]) as node:
        client = _client(node)
        try:
            client.create_producer("persistent://public/default/stats-wal").send(b"x")
        finally:
            client.close()
        for path in ("/admin/v2/persistent/public/default/stats-wal/stats",
                     "/console/api/stats/persistent/public/default/stats-wal"):
            with urllib.request.urlopen(node.http + path, timeout=10) as response:
                stats = json.loads(response.read())
            assert stats["walProfile"] == "local"
            assert stats["walUploadLagBytes"] >= 0 and stats["walUploadLagSeconds"] >= 0


def test_a_partitioned_topics_persistence_policy_reaches_every_partition(tmp_path: Path):
    with running(tmp_path / "data") as node:
        topic = "persistent://public/default/parted-wal"
        admin(node, "PUT", "/persistent/public/default/parted-wal/partitions", 3)
        admin(node, "POST", "/persistent/public/default/parted-wal/persistence",
              {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1, "walProfile": "local"})
        client = _client(node)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(30):
                producer.send(b"p%d" % i, partition_key=str(i))
            consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
            got = sorted(consumer.receive(30_000).data() for _ in range(30))
            assert got == sorted(b"p%d" % i for i in range(30))
        finally:
            client.close()
        for index in range(3):
            with urllib.request.urlopen(f"{node.http}/admin/v2/persistent/public/default/"
                                        f"parted-wal-partition-{index}/stats", timeout=10) as response:
                assert json.loads(response.read())["walProfile"] == "local"


@pytest.mark.parametrize("group_ms", [None, 0])
def test_uploads_go_up_a_block_at_a_time_and_are_read_back_with_the_wal_gone(tmp_path: Path, group_ms):
    """Hundreds of acknowledged flushes reach the store as a few group objects (with
    ``--wal-upload-group-ms 0``, an object each); with the WAL directory wiped after a kill -9,
    every message (Pulsar and Kafka) is read from the store."""
    from confluent_kafka import Producer

    grouping = [] if group_ms is None else ["--wal-upload-group-ms", str(group_ms)]
    node = Standalone(tmp_path / "data", [*FAST_GC, "--wal-profile", "local", *grouping])
    node.start()
    try:
        client = _client(node)
        topic = "persistent://public/default/grouped"
        producer = client.create_producer(topic, batching_enabled=False)
        sent = [f"g-{i}".encode() for i in range(300)]
        for value in sent:
            producer.send(value)  # one at a time: a flush each
        client.close()
        kafka = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "linger.ms": 0})
        for i in range(100):
            kafka.produce("grouped-k", f"k-{i}".encode())
            kafka.flush(30)
        wait_until(lambda: _metric(node, "nereus_wal_held_entries") == 0, "every flush uploaded and dropped",
                   timeout=120)
        flushes = _metric(node, "nereus_storage_wal_objects_total")
        uploads = _metric(node, 'nereus_storage_object_puts_total{kind="wal_upload"}')
        groups = list((tmp_path / "data").rglob("*.group"))
        if group_ms is None:
            assert flushes >= 400 and 0 < uploads <= flushes / 10, (flushes, uploads)
            assert groups, "no group object in the store"
        else:
            assert flushes >= 400 and uploads == flushes and not groups, (flushes, uploads)
        node.kill()
        wals = [p.parent for p in (tmp_path / "data").rglob("replica-id")]
        assert wals, "no WAL directory found"
        for wal in wals:
            shutil.rmtree(wal)
        node.start()

        client = _client(node)
        try:
            assert _read(client, topic, 300) == sent
        finally:
            client.close()
        assert _consume(node, "grouped-k", 100) == [f"k-{i}".encode() for i in range(100)]
    finally:
        node.kill()
