"""``nereus lakehouse deliver`` delivers records acknowledged on a broker's WAL and not uploaded
yet: with ``--wal-auth-params`` it reads them from the WAL service; without, it waits for the upload."""

from __future__ import annotations

import threading

import pytest

deltalake = pytest.importorskip("deltalake")

from click.testing import CliRunner  # noqa: E402

from nereus.lakehouse.cli import lakehouse  # noqa: E402
from tests.lakehouse.wal_outage import records_on_the_wal_only, upload_lag  # noqa: E402
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
    sent = [b"d%d" % i for i in range(30)]
    with records_on_the_wal_only(tmp_path, "deliver-wal", TOPIC, sent) as (node, objects, s3, token):
        table = tmp_path / "with-token"
        result = _deliver(node, objects, table, "--wal-auth-params", f"token:{token}")
        assert result.exit_code == 0, result.output
        assert _values(table) == sent
        assert upload_lag(node) > 0  # read from the WAL service, not the store

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
        wait_until(lambda: upload_lag(node) == 0, "the WAL uploaded", timeout=60)


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
