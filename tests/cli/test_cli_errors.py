"""Start-up failures of `nereus standalone`, `broker` and `oxia`: one line on stderr, exit code 1, no traceback."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.moto_server import BUCKET, CREDENTIALS, serve_for_session
from tests.ports import free_port, port_run

from .processes import Server, assert_one_line_failure, fail, hold_port

STANDALONE_PORTS = ("http", "pulsar", "kafka", "oxia")
FLAGS = {"http": "--http-port (webServicePort)", "pulsar": "--pulsar-port (brokerServicePort)",
         "kafka": "--kafka-port (kafkaListeners)", "oxia": "--oxia-port (oxiaPort)"}


def _standalone(data_dir: Path, ports: dict) -> list[str]:
    args = ["standalone", "--data-dir", str(data_dir), "--compaction-interval", "0"]
    for name in STANDALONE_PORTS:
        args += [f"--{name}-port", str(ports[name])]
    return args


@pytest.mark.parametrize("listener", STANDALONE_PORTS)
def test_a_standalone_port_in_use_names_the_port_and_its_flag(tmp_path: Path, listener: str):
    taken = hold_port()
    try:
        port = taken.getsockname()[1]
        ports = {name: free_port() for name in STANDALONE_PORTS} | {listener: port}
        last = assert_one_line_failure(_standalone(tmp_path / "data", ports), f"port {port}",
                                       f"{listener} listener", FLAGS[listener])
    finally:
        taken.close()
    assert "already in use" in last


@pytest.fixture
def metadata(tmp_path: Path):
    """A real `nereus oxia` metadata service."""
    port = free_port()
    server = Server(["oxia", "--data-dir", str(tmp_path / "meta"), "--port", str(port)], tmp_path / "oxia.log")
    try:
        server.wait_port(port)
        yield f"oxia://127.0.0.1:{port}"
    finally:
        assert server.stop() == 0, server.text()[-3000:]


@pytest.mark.parametrize("listener", ("http", "pulsar", "kafka"))
def test_a_broker_port_in_use_names_the_port_and_its_flag(tmp_path: Path, metadata: str, listener: str):
    taken = hold_port()
    try:
        port = taken.getsockname()[1]
        args = ["broker", "--metadata", metadata, "--object-store", (tmp_path / "objects").as_uri(),
                "--compaction-interval", "0"]
        for name in ("http", "pulsar", "kafka"):
            args += [f"--{name}-port", str(port if name == listener else 0)]
        assert_one_line_failure(args, f"port {port}", f"{listener} listener", FLAGS[listener])
    finally:
        taken.close()


def test_an_oxia_port_in_use_names_the_port_and_its_flag(tmp_path: Path):
    taken = hold_port()
    try:
        port = taken.getsockname()[1]
        assert_one_line_failure(["oxia", "--data-dir", str(tmp_path / "meta"), "--port", str(port)],
                                f"port {port}", "--port")
    finally:
        taken.close()


def test_a_second_standalone_on_a_data_dir_in_use_is_refused(tmp_path: Path):
    ports = {name: free_port() for name in STANDALONE_PORTS}
    first = Server(_standalone(tmp_path / "data", ports), tmp_path / "first.log")
    try:
        first.wait_port(ports["pulsar"])
        others = {name: free_port() for name in STANDALONE_PORTS}
        assert_one_line_failure(_standalone(tmp_path / "data", others), "data directory", str(tmp_path / "data"),
                                f"locked by process {first.proc.pid}")
        # An oxia server on the same directory is refused as well.
        assert_one_line_failure(["oxia", "--data-dir", str(tmp_path / "data"), "--port", "0"], "locked")
        assert first.proc.poll() is None
    finally:
        assert first.stop() == 0, first.text()[-3000:]
    # The lock went with the process: the directory can be used again.
    again = Server(_standalone(tmp_path / "data", ports), tmp_path / "again.log")
    try:
        again.wait_port(ports["pulsar"])
    finally:
        assert again.stop() == 0, again.text()[-3000:]


def test_a_second_oxia_server_on_a_data_dir_in_use_is_refused(tmp_path: Path):
    port = free_port()
    first = Server(["oxia", "--data-dir", str(tmp_path / "meta"), "--port", str(port)], tmp_path / "oxia.log")
    try:
        first.wait_port(port)
        assert_one_line_failure(["oxia", "--data-dir", str(tmp_path / "meta"), "--port", "0"], "locked by process")
    finally:
        assert first.stop() == 0, first.text()[-3000:]


def _bad_object_stores(tmp_path: Path) -> list[tuple[str, str]]:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    cases = [("ftp://nowhere/x", "'ftp'"), ("s3://", "no bucket"), ("s3:/bucket/prefix", "malformed"),
             ("s3://bucket?colour=blue", "unknown option"), ((a_file / "objects").as_uri(), "not writable")]
    if os.geteuid() != 0:  # root writes anywhere
        read_only = tmp_path / "read-only"
        read_only.mkdir(mode=0o500)
        cases.append(((read_only / "objects").as_uri(), "not writable"))
    return cases


def test_a_bad_object_store_url_is_one_line(tmp_path: Path, metadata: str):
    for url, expected in _bad_object_stores(tmp_path):
        assert_one_line_failure(["standalone", "--data-dir", str(tmp_path / "data"), "--object-store", url,
                                 "--http-port", "0", "--pulsar-port", "0", "--kafka-port", "0", "--oxia-port", "0"],
                                expected)
        assert_one_line_failure(["broker", "--metadata", metadata, "--object-store", url, "--http-port", "0",
                                 "--pulsar-port", "0", "--kafka-port", "0"], expected)
    assert_one_line_failure(["broker", "--metadata", metadata, "--object-store", "memory://", "--http-port", "0",
                             "--pulsar-port", "0", "--kafka-port", "0"], "memory://")


@pytest.fixture(scope="module")
def moto_endpoint(tmp_path_factory):
    yield from serve_for_session(tmp_path_factory.mktemp("moto") / "moto.log")


def _s3(bucket: str, endpoint: str) -> str:
    return f"s3://{bucket}/nereus?" + "&".join(f"{k}={v}" for k, v in {"endpoint": endpoint, **CREDENTIALS}.items())


def test_an_s3_store_without_the_bucket_or_an_answer_is_one_line_stating_the_time_waited(tmp_path: Path,
                                                                                          metadata: str,
                                                                                          moto_endpoint: str):
    silent = _s3(BUCKET, f"http://127.0.0.1:{free_port()}")  # nothing listens: the client retries until the bound
    missing = _s3("no-such-bucket", moto_endpoint)
    for url, bound, expected in ((silent, "1", "(gave up after 1 s)"), (missing, "60", "bucket 'no-such-bucket' not found")):
        for command in (["standalone", "--data-dir", str(tmp_path / "data"), "--oxia-port", "0"],
                        ["broker", "--metadata", metadata]):
            last = assert_one_line_failure([*command, "--object-store", url, "--object-store-timeout", bound,
                                            "--http-port", "0", "--pulsar-port", "0", "--kafka-port", "0"],
                                           "cannot use the object store s3://", expected)
            assert "secret_access_key" not in last  # the URL's query (credentials) stays out of the message
    # The bucket moto has passes the check: the broker starts.
    ports = {name: free_port() for name in ("http", "pulsar", "kafka")}
    server = Server(["broker", "--metadata", metadata, "--object-store", _s3(BUCKET, moto_endpoint),
                     *(arg for name, port in ports.items() for arg in (f"--{name}-port", str(port)))],
                    tmp_path / "broker.log")
    try:
        server.wait_port(ports["pulsar"])
    finally:
        assert server.stop() == 0, server.text()[-3000:]


def test_a_gc_pending_timeout_shorter_than_a_writer_reservation_is_refused(tmp_path: Path):
    # Below twice the WAL writer's name reservation life, the collector could resolve a live writer's names.
    code, last, stderr = fail(["standalone", "--data-dir", str(tmp_path / "data"), "--gc-pending-timeout", "5",
                               "--http-port", "0", "--pulsar-port", "0", "--kafka-port", "0", "--oxia-port", "0"])
    assert code == 2 and "Traceback" not in stderr, stderr  # click's usage error
    assert "--gc-pending-timeout" in last and "x>=20" in last, last
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("given", [["--sbt-catalog", "catalog.db"], ["--config", "bad.conf"]])
def test_a_built_in_tables_catalog_that_is_no_url_is_refused(tmp_path: Path, given: list[str]):
    (tmp_path / "bad.conf").write_text("sbtCatalogUri=catalog.db\n")
    given = [str(tmp_path / g) if g == "bad.conf" else g for g in given]
    code, last, stderr = fail(["standalone", "--data-dir", str(tmp_path / "data"), *given])
    assert code == (2 if given[0] == "--sbt-catalog" else 1) and "Traceback" not in stderr, stderr  # usage / config
    assert "'catalog.db' is no catalog URL" in last and "sqlite:///PATH" in last, last
    assert not (tmp_path / "data").exists()


def test_an_unreachable_metadata_service_is_one_line_stating_the_time_waited(tmp_path: Path):
    url = f"oxia://127.0.0.1:{free_port()}"
    assert_one_line_failure(["broker", "--metadata", url, "--object-store", (tmp_path / "objects").as_uri(),
                             "--metadata-timeout", "1.5", "--http-port", "0", "--pulsar-port", "0", "--kafka-port",
                             "0"], url, "gave up after 1.5 s")


def test_a_port_in_use_by_a_second_broker_process_stops_the_standalone(tmp_path: Path):
    ports = {name: port_run() for name in STANDALONE_PORTS}  # broker process 1 needs each port + 1
    taken = socket.socket()
    try:
        taken.bind(("127.0.0.1", ports["pulsar"] + 1))  # broker process 1 listens on the given ports + 1
        taken.listen()
    except OSError:
        taken.close()
        pytest.skip("the port after the chosen one is taken")
    try:
        code, last, stderr = fail(_standalone(tmp_path / "data", ports) + ["--brokers", "2"])
    finally:
        taken.close()
    assert code == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert last.startswith("Error: ") and "broker process 1 could not start" in last, last
    assert f"port {ports['pulsar'] + 1} of the pulsar listener is already in use" in last, stderr[-3000:]
    assert "restarting" not in stderr
