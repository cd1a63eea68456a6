"""A broker joining metadata that holds a standalone's topics says so in one warning line."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

from tests.standalone_process import admin, free_port, running
from tests.waiting import wait_until

WARNING = "topics made by `nereus standalone`"


def _brokers(node) -> list[str]:
    with urllib.request.urlopen(f"{node.http}/admin/v2/brokers/standalone", timeout=5) as response:
        return json.loads(response.read())


def test_a_broker_joining_a_standalones_metadata_warns_once(tmp_path):
    with running(tmp_path / "data") as node:
        admin(node, "PUT", "/persistent/public/default/made-by-the-standalone")
        admin(node, "PUT", "/persistent/public/default/partitioned/partitions", 2)
        log = tmp_path / "broker.log"
        ports = [str(free_port()) for _ in range(3)]
        broker = subprocess.Popen(
            [sys.executable, "-m", "nereus.cli", "--log-level", "WARNING", "broker",
             "--metadata", f"oxia://127.0.0.1:{node.ports['oxia']}",
             "--object-store", (tmp_path / "data" / "objects").as_uri(), "--broker-name", "joiner",
             "--http-port", ports[0], "--pulsar-port", ports[1], "--kafka-port", ports[2],
             "--compaction-interval", "0", "--log-dir", str(tmp_path / "logs")],
            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
        try:
            wait_until(lambda: len(_brokers(node)) == 2, "the joining broker registered")
            wait_until(lambda: WARNING in log.read_text(), "the warning")
        finally:
            broker.send_signal(signal.SIGTERM)
            assert broker.wait(timeout=60) == 0, log.read_text()[-3000:]
        warnings = [line for line in log.read_text().splitlines() if WARNING in line]
        assert len(warnings) == 1, log.read_text()
        assert "holds 3 topics" in warnings[0] and str((tmp_path / "data").resolve()) in warnings[0]
        assert WARNING not in node.log.read_text()
