"""`nereus standalone` as a real process: health, metrics, clean shutdown, CLI errors."""

import asyncio
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from nereus.meta import connect
from tests.ports import free_port

NEREUS = [sys.executable, "-m", "nereus.cli"]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> bytes:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"standalone exited early: {proc.stderr.read().decode()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return response.read()
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer")


async def _metadata_reachable_over_oxia(port: int) -> None:
    """Other processes (pipeline, CLI, a second broker) reach the metadata of a running standalone."""
    async with connect(f"oxia://127.0.0.1:{port}") as meta:
        put = await meta.put("/tools/probe", b"hello")
        got = await meta.get("/tools/probe")
        assert got.value == b"hello" and got.version.version_id == put.version.version_id


def test_standalone_serves_health_and_metrics_and_stops_cleanly(tmp_path: Path):
    port, oxia_port = free_port(), free_port()
    args = ["standalone", "--data-dir", str(tmp_path / "data"), "--http-port", str(port),
            "--pulsar-port", str(free_port()), "--kafka-port", str(free_port()), "--oxia-port", str(oxia_port)]
    proc = subprocess.Popen(NEREUS + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_http(f"http://127.0.0.1:{port}/admin/v2/brokers/health", proc) == b"ok"
        metrics = wait_http(f"http://127.0.0.1:{port}/metrics", proc).decode()
        assert "nereus_storage_appended_entries_total" in metrics
        deadline = time.monotonic() + 30  # a broker alone takes the cluster-wide GC lease
        while 'nereus_cluster_lease_held{worker="gc"} 1.0' not in metrics and time.monotonic() < deadline:
            time.sleep(0.1)
            metrics = wait_http(f"http://127.0.0.1:{port}/metrics", proc).decode()
        assert 'nereus_cluster_lease_held{worker="gc"} 1.0' in metrics
        assert "nereus_cluster_owned_topics" in metrics
        assert "process_resident_memory_bytes" in metrics
        assert (tmp_path / "data" / "meta").is_dir()
        asyncio.run(_metadata_reachable_over_oxia(oxia_port))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
    assert code == 0, proc.stderr.read().decode()[-2000:]


def test_cli_rejects_bad_options_with_a_readable_message(tmp_path: Path):
    result = subprocess.run(NEREUS + ["standalone", "--data-dir", str(tmp_path), "--object-store", "ftp://nowhere",
                                      "--http-port", str(free_port())], capture_output=True, timeout=60)
    assert result.returncode != 0
    assert b"ftp" in result.stderr and b"Traceback" not in result.stderr
    result = subprocess.run(NEREUS + ["standalone", "--http-port", "70000"], capture_output=True, timeout=60)
    assert result.returncode == 2 and b"70000" in result.stderr


def test_version_and_a_log_level_given_after_the_command(tmp_path: Path):
    result = subprocess.run(NEREUS + ["--version"], capture_output=True, timeout=60)
    assert result.returncode == 0 and result.stdout.decode().startswith("nereus, version ")
    outputs = {}
    for level in ("INFO", "WARNING"):
        port = free_port()
        proc = subprocess.Popen(NEREUS + ["oxia", "--data-dir", str(tmp_path / level), "--port", str(port),
                                          "--log-level", level], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    time.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            outputs[level] = proc.communicate(timeout=30)[1].decode()
    # Logged before the port opens, so it is there once the port accepted.
    assert "INFO nereus.meta.embedded.engine" in outputs["INFO"]
    assert "INFO" not in outputs["WARNING"]


def test_an_unreachable_metadata_service_fails_in_bounded_time_with_one_line(tmp_path: Path):
    started = time.monotonic()
    result = subprocess.run(NEREUS + ["broker", "--metadata", f"oxia://127.0.0.1:{free_port()}", "--object-store",
                                      (tmp_path / "objects").as_uri(), "--metadata-timeout", "2",
                                      "--http-port", "0", "--pulsar-port", "0", "--kafka-port", "0"],
                            capture_output=True, timeout=60)
    assert result.returncode == 1
    assert time.monotonic() - started < 30
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr
    assert "Error: cannot use the metadata service" in stderr and "gave up after 2 s" in stderr
