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


def test_standalone_runs_two_broker_processes_that_share_the_topics(tmp_path: Path):
    http, pulsar_port, kafka, oxia = (port_run() for _ in range(4))
    log = tmp_path / "standalone.log"
    args = ["--data-dir", str(tmp_path / "data"), "--brokers", "2", "--compaction-interval", "0",
            "--http-port", str(http), "--pulsar-port", str(pulsar_port), "--kafka-port", str(kafka),
            "--oxia-port", str(oxia)]
    proc = subprocess.Popen(NEREUS + args, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
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
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0, log.read_text()[-3000:]
    gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, "the child broker outlived the standalone"
