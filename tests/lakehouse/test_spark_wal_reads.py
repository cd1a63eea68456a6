"""Spark reads records that are acknowledged on a broker's WAL and not uploaded yet: its tasks find
the WAL service from the metadata plane and show it a broker token (``walAuthParams``); without
one they wait for the upload."""

from __future__ import annotations

import re

import pulsar
import pytest

from nereus.auth.tokens import create_token
from nereus.lakehouse.options import wal_access
from tests.auth.test_wal_broker_tokens import _config
from tests.delayed_s3 import DelayedS3
from tests.standalone_process import Standalone
from tests.waiting import wait_until

TOPIC = "persistent://public/default/spark-wal"


def _upload_lag(node: Standalone) -> float:
    found = re.findall(r"^nereus_storage_wal_upload_lag_bytes(?:{[^}]*})? (\S+)$", node.metrics(), re.M)
    return sum(float(v) for v in found)


def _values(spark, node: Standalone, objects: str, **options: str) -> list[bytes]:
    reader = (spark.read.format("nereus").option("metadata", f"oxia://127.0.0.1:{node.ports['oxia']}")
              .option("objects", objects).option("topic", TOPIC))
    for key, value in options.items():
        reader = reader.option(key, value)
    return [bytes(row.value) for row in reader.load().orderBy("offset").collect()]


def test_spark_reads_the_wal_while_the_object_store_is_down(spark, tmp_path):
    config = _config(tmp_path)
    secret = (tmp_path / "secret.key").read_bytes()
    with DelayedS3(tmp_path / "s3", latency_scale=0) as s3:
        objects = s3.store_url("spark-wal")
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
                sent = [b"m%d" % i for i in range(40)]
                for value in sent:
                    producer.send(value)
            finally:
                client.close()
            assert _upload_lag(node) > 0  # acknowledged from the WAL: nothing reached the store

            token = create_token("broker", secret_key=secret)  # a superuser role of the config
            assert _values(spark, node, objects, walAuthParams=f"token:{token}") == sent
            assert _upload_lag(node) > 0  # read from the WAL service, not the store

            s3.outage(False)  # without credentials the tasks wait for the upload
            assert _values(spark, node, objects) == sent
            wait_until(lambda: _upload_lag(node) == 0, "the WAL uploaded", timeout=60)
        finally:
            node.kill()


@pytest.mark.parametrize("options, message", [
    ({"walTlsCertFile": "/c.pem"}, "together"),
    ({"walUploadWaitSeconds": "-1"}, "walUploadWaitSeconds"),
    ({"walUploadWaitSeconds": "soon"}, "walUploadWaitSeconds"),
    ({"walAuthParams": "file:///no/such/token"}, "walAuthParams: no token file"),
])
def test_bad_wal_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        wal_access(options)
