"""SIGINT (a Ctrl-C reaches the whole process group) and SIGTERM: a graceful stop, exit code 0, no traceback."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import pytest

from tests.ports import port_run

from .processes import Server
from tests.ports import free_port

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


def _stop(server: Server, how: str) -> int:
    if how == "SIGINT":
        os.killpg(server.proc.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C
    else:
        server.proc.send_signal(signal.SIGTERM)  # what `kill PID` sends: the main process only
    return server.proc.wait(timeout=120)


def _assert_clean(server: Server, code: int) -> None:
    log = server.text()
    assert code == 0, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.parametrize("how", SIGNALS)
def test_a_standalone_and_its_broker_processes_stop(tmp_path: Path, how: str):
    ports = {"http": port_run(), "pulsar": port_run(), "kafka": port_run(), "oxia": free_port()}
    args = ["standalone", "--data-dir", str(tmp_path / "data"), "--brokers", "2", "--compaction-interval", "0"]
    for name, port in ports.items():
        args += [f"--{name}-port", str(port)]
    server = Server(args, tmp_path / "standalone.log")
    try:
        server.wait_port(ports["pulsar"])
        server.wait_port(ports["pulsar"] + 1)  # the second broker process
        family = psutil.Process(server.proc.pid).children(recursive=True)
        assert family, "no broker child process"
        code = _stop(server, how)
    finally:
        server.stop()
    _assert_clean(server, code)
    gone, alive = psutil.wait_procs(family, timeout=60)
    assert not alive, alive
    assert "restarting" not in server.text()  # a child stopped with the standalone is not restarted


@pytest.mark.parametrize("how", SIGNALS)
def test_a_broker_stops(tmp_path: Path, how: str):
    oxia_port = free_port()
    oxia = Server(["oxia", "--data-dir", str(tmp_path / "meta"), "--port", str(oxia_port)], tmp_path / "oxia.log")
    try:
        oxia.wait_port(oxia_port)
        pulsar_port = free_port()
        broker = Server(["broker", "--metadata", f"oxia://127.0.0.1:{oxia_port}", "--object-store",
                         (tmp_path / "objects").as_uri(), "--http-port", "0", "--kafka-port", "0", "--pulsar-port",
                         str(pulsar_port), "--compaction-interval", "0"], tmp_path / "broker.log")
        try:
            broker.wait_text("ready")
            code = _stop(broker, how)
        finally:
            broker.stop()
        _assert_clean(broker, code)
    finally:
        assert oxia.stop() == 0


@pytest.mark.parametrize("how", SIGNALS)
def test_an_oxia_server_stops(tmp_path: Path, how: str):
    port = free_port()
    oxia = Server(["oxia", "--data-dir", str(tmp_path / "meta"), "--port", str(port)], tmp_path / "oxia.log")
    try:
        oxia.wait_port(port)
        code = _stop(oxia, how)
    finally:
        oxia.stop()
    _assert_clean(oxia, code)
    assert "stopping the oxia server" in oxia.text()


def test_a_broker_waiting_for_its_metadata_service_stops_at_once_on_sigterm(tmp_path: Path):
    broker = Server(["broker", "--metadata", f"oxia://127.0.0.1:{free_port()}", "--object-store",
                     (tmp_path / "objects").as_uri(), "--metadata-timeout", "300", "--http-port", "0",
                     "--pulsar-port", "0", "--kafka-port", "0", "--compaction-interval", "0"], tmp_path / "broker.log")
    try:
        broker.wait_text("http listener on")  # bound; now waiting for the metadata service
        broker.proc.send_signal(signal.SIGTERM)
        code = broker.proc.wait(timeout=120)  # well inside --metadata-timeout: the signal ended the wait
    finally:
        broker.stop()
    _assert_clean(broker, code)
    assert "cannot use the metadata service" not in broker.text()
