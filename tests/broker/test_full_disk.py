"""A standalone whose data directory fills up (a small tmpfs): writes are refused, not retried into
longer waits, until space is freed; everything acknowledged stays readable."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pulsar
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from nereus.codec.kafka.records import Record, build_batch
from tests.kafka.raw import RawKafka
from tests.standalone_process import Standalone

KAFKA_STORAGE_ERROR = 56

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None,
                                reason="mounting a small tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)], check=True, timeout=30)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


def _health(node) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{node.http}/admin/v2/brokers/health", timeout=40) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _refused_metric(node) -> float:
    for line in node.metrics().splitlines():
        if line.startswith("nereus_storage_writes_refused "):
            return float(line.split()[1])
    raise AssertionError("no nereus_storage_writes_refused metric")


def _wait(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
    return result


def test_a_full_disk_refuses_producers_until_space_is_freed_and_loses_nothing(small_disk, tmp_path):
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * (8 << 20))  # freed later: the operator making room
    node = Standalone(small_disk / "data")
    node.log = tmp_path / "standalone.log"  # off the full disk, so the broker can still say why
    node.start()
    client = pulsar.Client(node.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("kafka-fills", 1, 1)])["kafka-fills"].result(timeout=30)
        producer = client.create_producer("fills", batching_enabled=False, send_timeout_millis=10_000)
        acked = _fill(producer)
        assert acked, "nothing fitted on the disk"

        status, body = _health(node)
        assert status == 500 and "out of space" in body, (status, body)
        assert _refused_metric(node) == 1
        with pytest.raises(pulsar.PulsarException):  # refused at once, not accepted for a write that fails
            client.create_producer("fills-new", send_timeout_millis=5_000)
        raw = RawKafka(node.bootstrap)
        try:
            batch = build_batch([Record(0, 1_700_000_000_000, b"k", b"v")])
            assert raw.produce("kafka-fills", 0, batch).error_code == KAFKA_STORAGE_ERROR
        finally:
            raw.close()
        log = node.log.read_text()
        assert "refusing writes: storage is out of space" in log

        filler.unlink()
        _wait(lambda: _refused_metric(node) == 0, "writes taken again after space was freed")
        assert _health(node)[0] == 200
        producer = _wait(lambda: _try(lambda: client.create_producer("fills", batching_enabled=False)),
                         "a producer accepted again")
        producer.send(b"after")
        reader = client.create_reader("fills", pulsar.MessageId.earliest)
        stored = []
        while reader.has_message_available():
            stored.append(reader.read_next(timeout_millis=10_000).data())
        assert [v for v in stored if v in set(acked)] == acked, "an acknowledged value was lost or reordered"
        assert stored[-1] == b"after"
    finally:
        client.close()
        node.stop()


def _fill(producer) -> list[bytes]:
    """Send 100 KB values until a send fails; returns the ones acknowledged."""
    acked = []
    for i in range(2000):
        value = b"%06d" % i + b"x" * 100_000
        try:
            producer.send(value)
        except pulsar.PulsarException:
            return acked
        acked.append(value)
    raise AssertionError("the disk never filled")


def _try(make):
    try:
        return make()
    except pulsar.PulsarException:
        return None


@pytest.fixture
def wal_disk(tmp_path):
    """A 100 MB disk for the WAL alone: its first 64 MiB segment fits, the second does not."""
    mount = tmp_path / "wal-disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=100m", "tmpfs", str(mount)], check=True, timeout=30)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


def test_a_full_wal_disk_refuses_writes_with_the_protocols_storage_errors_and_loses_nothing(wal_disk, tmp_path):
    """The local WAL profile on a disk that fills: once no new WAL segment fits, sends fail (not hang),
    new producers get PersistenceError and Kafka produces KAFKA_STORAGE_ERROR while a probe of the WAL
    fails, the log says why; everything acknowledged before stays readable."""
    node = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--wal-profile", "local",
                                          "--wal-dir", str(wal_disk / "wal")])
    node.start()
    client = pulsar.Client(node.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        admin.create_topics([NewTopic("wal-fills", 1, 1)])["wal-fills"].result(timeout=30)
        producer = client.create_producer("wal-fills-p", batching_enabled=False, send_timeout_millis=10_000)
        acked = _fill(producer)
        assert acked, "nothing fitted in the first segment"
        assert _refused_metric(node) == 1
        with pytest.raises(pulsar.PulsarException):  # refused at once while the WAL cannot be written
            client.create_producer("wal-fills-new", send_timeout_millis=5_000)
        raw = RawKafka(node.bootstrap)
        try:
            batch = build_batch([Record(0, 1_700_000_000_000, b"k", b"v")])
            assert raw.produce("wal-fills", 0, batch).error_code == KAFKA_STORAGE_ERROR
        finally:
            raw.close()
        assert "no space left in WAL directory" in node.log.read_text()
        reader = client.create_reader("wal-fills-p", pulsar.MessageId.earliest)
        stored = [reader.read_next(timeout_millis=10_000).data() for _ in acked]
        assert stored == acked, "an acknowledged value was lost or reordered"
    finally:
        client.close()
        node.kill()
