"""``nereus lakehouse deliver`` delivers records acknowledged on a broker's WAL and not uploaded
yet: with ``--wal-auth-params`` it reads them from the WAL service; without, it waits for the upload."""

from __future__ import annotations

import threading

import pulsar
import pytest

deltalake = pytest.importorskip("deltalake")

from click.testing import CliRunner  # noqa: E402

from nereus.auth.tokens import create_token  # noqa: E402
from nereus.lakehouse.cli import lakehouse  # noqa: E402
from tests.auth.test_wal_broker_tokens import _config  # noqa: E402
from tests.delayed_s3 import DelayedS3  # noqa: E402
from tests.lakehouse.test_spark_wal_reads import _upload_lag  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402
from tests.waiting import wait_until  # noqa: E402

TOPIC = "persistent://public/default/deliver-wal"


def _deliver(node: Standalone, objects: str, table, *extra: str):
    return CliRunner().invoke(lakehouse, [
        "deliver", "--metadata", f"oxia://127.0.0.1:{node.ports['oxia']}", "--objects", objects,
        "--topic", TOPIC, "--delta", str(table), "--once", "--no-progress", *extra])


def _values(table) -> list[bytes]:
    rows = deltalake.DeltaTable(str(table)).to_pyarrow_table().sort_by("offset")
    return [bytes(v) for v in rows.column("value").to_pylist()]


def test_deliver_reads_the_wal_while_the_object_store_is_down(tmp_path):
    config = _config(tmp_path)
    secret = (tmp_path / "secret.key").read_bytes()
    with DelayedS3(tmp_path / "s3", latency_scale=0) as s3:
        objects = s3.store_url("deliver-wal")
        node = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--wal-profile", "local",
                                              "--config", config, "--object-store", objects])
        node.start()
        try:
            s3.outage(True)
            client = pulsar.Client(node.url, operation_timeout_seconds=30,
                                   authentication=pulsar.AuthenticationToken(create_token("admin", secret_key=secret)),
                                   logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            try:
                producer = client.create_producer(TOPIC, batching_enabled=False)
                sent = [b"d%d" % i for i in range(30)]
                for value in sent:
                    producer.send(value)
            finally:
                client.close()
            assert _upload_lag(node) > 0

            token = create_token("broker", secret_key=secret)
            table = tmp_path / "with-token"
            result = _deliver(node, objects, table, "--wal-auth-params", f"token:{token}")
            assert result.exit_code == 0, result.output
            assert _values(table) == sent
            assert _upload_lag(node) > 0  # read from the WAL service, not the store

            # Without credentials the job waits for the upload: it ends once the outage does.
            table = tmp_path / "without"
            outcome = {}
            job = threading.Thread(target=lambda: outcome.setdefault("result", _deliver(node, objects, table)))
            job.start()
            job.join(1.0)
            assert job.is_alive()  # still waiting: the replica refused it and the store is down
            s3.outage(False)
            job.join(120)
            assert outcome["result"].exit_code == 0, outcome["result"].output
            assert _values(table) == sent
            wait_until(lambda: _upload_lag(node) == 0, "the WAL uploaded", timeout=60)
        finally:
            node.kill()


@pytest.mark.parametrize("extra, message", [
    (["--wal-tls-cert-file", "/c.pem"], "together"),
    (["--wal-upload-wait", "-1"], "--wal-upload-wait"),
    (["--wal-auth-params", "file:///no/such/token"], "no token file"),
])
def test_bad_wal_options_are_named(extra, message):
    result = CliRunner().invoke(lakehouse, ["deliver", "--metadata", "oxia://127.0.0.1:1", "--objects", "file:///x",
                                            "--topic", "t", "--delta", "/tmp/none", *extra])
    assert result.exit_code == 2
    assert message in result.output
