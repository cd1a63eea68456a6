"""The console of a two-broker cluster (``nereus standalone --brokers 2``): whichever broker is asked answers
for the whole cluster, and each broker's "Since" is its start."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pulsar
import pytest

from tests.ports import port_run
from tests.waiting import wait_until

NEREUS = [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "standalone"]
PARTITIONS = 8


def _get(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-cluster")
    http, pulsar_port, kafka, oxia = (port_run() for _ in range(4))
    args = ["--data-dir", str(tmp / "data"), "--brokers", "2", "--compaction-interval", "0",
            "--http-port", str(http), "--pulsar-port", str(pulsar_port), "--kafka-port", str(kafka),
            "--oxia-port", str(oxia)]
    log = tmp / "standalone.log"
    proc = subprocess.Popen(NEREUS + args, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    urls = [f"http://127.0.0.1:{http}", f"http://127.0.0.1:{http + 1}"]

    def both_registered():
        assert proc.poll() is None, Path(log).read_text()[-3000:]
        try:
            return all(len(_get(u + "/console/api/overview")["brokers"]) == 2 for u in urls)
        except OSError:
            return False

    wait_until(both_registered, "both brokers registered")
    try:
        yield urls, f"pulsar://127.0.0.1:{pulsar_port}"
    finally:
        proc.terminate()
        proc.wait(60)


def test_since_messages_and_history_span_the_cluster(cluster):
    urls, service_url = cluster
    before_topics = time.time() * 1000
    started = {b["name"]: b["startedMs"] for b in _get(urls[0] + "/console/api/overview")["brokers"]}
    topic = "persistent://public/default/spread"
    request = urllib.request.Request(urls[0] + "/admin/v2/persistent/public/default/spread/partitions",
                                     data=str(PARTITIONS).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).close()
    client = pulsar.Client(service_url, operation_timeout_seconds=30,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.subscribe(topic, "unread")  # a backlog on every partition, wherever it lives
        producer = client.create_producer(topic, batching_enabled=False,
                                          message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        for i in range(4 * PARTITIONS):
            producer.send(f"m{i}".encode())
        owned = [set(_get(u + "/admin/v2/nereus/owned-topics")) for u in urls]
        assert all(any(t.startswith(topic + "-partition-") for t in o) for o in owned), owned  # both serve some

        # Since: each broker's start, before these topics, however often its load was published since.
        overview = wait_until(lambda: (lambda o: all((b["load"] or {}).get("topics") for b in o["brokers"]) and o)(
            _get(urls[0] + "/console/api/overview")), "both brokers' loads published")
        assert {b["name"]: b["startedMs"] for b in overview["brokers"]} == started
        assert all(0 < ms < before_topics for ms in started.values())

        # Messages: every partition's, through either broker.
        for url in urls:
            view = _get(url + "/console/api/messages/persistent/public/default/spread?count=100")
            assert view["complete"] and len(view["messages"]) == 4 * PARTITIONS
            assert {m["partition"] for m in view["messages"]} == set(range(PARTITIONS))
            assert sorted(m["value"] for m in view["messages"]) == sorted(f"m{i}" for i in range(4 * PARTITIONS))
        assert [set(_get(u + "/admin/v2/nereus/owned-topics")) for u in urls] == owned  # read by their owners

        # History: the broker asked sums every broker's own samples.
        def summed():
            local = [{s[0]: s for s in _get(u + "/console/api/history?local=true")["samples"]} for u in urls]
            gathered = {s[0]: s for s in _get(urls[0] + "/console/api/history")["samples"]}
            # A sample taken after every message was sent (one taken while sending holds part of them).
            common = [t for t in local[0] if t in local[1] and t in gathered and local[0][t][3] and local[1][t][3]
                      and local[0][t][3] + local[1][t][3] == 4 * PARTITIONS]
            return common and (common[-1], local, gathered)

        at, local, gathered = wait_until(summed, "a sample with the whole backlog, parts of it on both brokers")
        assert gathered[at][3] == local[0][at][3] + local[1][at][3] == 4 * PARTITIONS
        topic_history = _get(urls[1] + "/console/api/history/persistent/public/default/spread")["samples"]
        assert max(s[3] for s in topic_history) == 4 * PARTITIONS
    finally:
        client.close()
