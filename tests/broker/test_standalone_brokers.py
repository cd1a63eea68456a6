"""`nereus standalone --brokers 2`: two broker processes over one embedded metadata engine."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pulsar
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.ports import port_run

NEREUS = [sys.executable, "-m", "nereus.cli", "--log-level", "INFO", "standalone"]


def _get_json(url: str):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def _wait(condition, what: str, proc: subprocess.Popen, log: Path, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"standalone exited early:\n{log.read_text()[-3000:]}")
        try:
            result = condition()
            if result:
                return result
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def _two_brokers(tmp_path: Path) -> tuple[subprocess.Popen, Path, tuple[int, int, int, int]]:
    """``nereus standalone --brokers 2`` started: (process, its log, its http/pulsar/kafka/oxia ports)."""
    ports = http, pulsar_port, kafka, oxia = tuple(port_run() for _ in range(4))
    log = tmp_path / "standalone.log"
    args = ["--data-dir", str(tmp_path / "data"), "--brokers", "2", "--compaction-interval", "0",
            "--http-port", str(http), "--pulsar-port", str(pulsar_port), "--kafka-port", str(kafka),
            "--oxia-port", str(oxia), "--session-timeout", "3"]
    return subprocess.Popen(NEREUS + args, stdout=subprocess.DEVNULL, stderr=open(log, "wb")), log, ports


def test_standalone_runs_two_broker_processes_that_share_the_topics(tmp_path: Path):
    proc, log, (http, pulsar_port, kafka, _oxia) = _two_brokers(tmp_path)
    children: list[psutil.Process] = []
    try:
        brokers = [f"127.0.0.1:{http}", f"127.0.0.1:{http + 1}"]
        for port in (http, http + 1):  # both list both, whichever is asked
            _wait(lambda p=port: sorted(_get_json(f"http://127.0.0.1:{p}/admin/v2/brokers/standalone")) == brokers,
                  "both brokers registered", proc, log)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) == 1
        client = pulsar.Client(f"pulsar://127.0.0.1:{pulsar_port}", operation_timeout_seconds=30,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        try:
            topics = [f"persistent://public/default/spread-{i}" for i in range(12)]
            for topic in topics:
                producer = client.create_producer(topic)
                producer.send(topic.encode())
                producer.close()
            owned = [_get_json(f"http://127.0.0.1:{p}/admin/v2/nereus/owned-topics") for p in (http, http + 1)]
            assert all(owned), owned  # each process serves some of them
            for topic in topics:  # the console of either broker shows every topic's stats, wherever it lives
                path = "/console/api/stats/" + topic.replace("persistent://", "persistent/")
                for port in (http, http + 1):
                    stats = _get_json(f"http://127.0.0.1:{port}{path}")
                    assert stats["storageSize"] > 0 and "publishers" in stats, (port, topic, stats)
            for topic in topics:  # and every one reads back through the first broker's address
                reader = client.create_reader(topic, pulsar.MessageId.earliest)
                assert reader.read_next(10_000).data() == topic.encode()
                reader.close()
        finally:
            client.close()

        # Kafka through the first broker's port: both brokers are listed and lead partitions.
        bootstrap = f"127.0.0.1:{kafka}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("spread", 8, 1)], operation_timeout=30)["spread"].result(timeout=60)
        leaders = {p.leader for p in admin.list_topics("spread", timeout=30).topics["spread"].partitions.values()}
        assert len(leaders) == 2, leaders
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(80):
            producer.produce("spread", b"%d" % i, partition=i % 8)
        assert producer.flush(60) == 0

        # A child broker killed (-9) is started again; every record reads back through its port.
        [child] = children
        child.kill()
        child.wait(30)
        _wait(lambda: [c.pid for c in psutil.Process(proc.pid).children(recursive=True)] not in ([], [child.pid]),
              "the killed broker started again", proc, log)
        children = psutil.Process(proc.pid).children(recursive=True)
        consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{kafka + 1}", "group.id": "spread",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.assign([TopicPartition("spread", p, 0) for p in range(8)])
        got: set[bytes] = set()

        def read_all() -> bool:
            got.update(m.value() for m in consumer.consume(100, timeout=0.5) if m.error() is None)
            return len(got) == 80
        try:
            _wait(read_all, "80 records through the restarted broker", proc, log, timeout=90)
        finally:
            consumer.close()
        assert "restarting it" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, "the child broker outlived the standalone"


def test_a_killed_standalone_takes_its_child_brokers_with_it(tmp_path: Path):
    """kill -9 of the standalone: its child broker notices (its lifeline pipe closes) and stops on its own."""
    proc, log, (http, _pulsar, _kafka, _oxia) = _two_brokers(tmp_path)
    try:
        _wait(lambda: len(_get_json(f"http://127.0.0.1:{http + 1}/admin/v2/brokers/standalone")) == 2,
              "both brokers registered", proc, log)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) == 1
    finally:
        proc.kill()
        proc.wait(timeout=30)
    gone, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, f"the child broker outlived the killed standalone:\n{log.read_text()[-3000:]}"
