"""A standalone whose acknowledged records sit on its local WAL only: token authentication, the
delayed S3 as its object store, in an outage while ``sent`` is produced."""

from __future__ import annotations

import contextlib
import re

import pulsar

from nereus.auth.tokens import create_token
from tests.auth.test_wal_broker_tokens import _config
from tests.delayed_s3 import DelayedS3
from tests.standalone_process import Standalone


def upload_lag(node: Standalone) -> float:
    found = re.findall(r"^nereus_storage_wal_upload_lag_bytes(?:{[^}]*})? (\S+)$", node.metrics(), re.M)
    return sum(float(v) for v in found)


@contextlib.contextmanager
def records_on_the_wal_only(tmp_path, bucket: str, topic: str, sent: list[bytes]):
    """Yields (node, object store URL, the S3 (``outage(False)`` ends it), a broker token)."""
    config = _config(tmp_path)
    secret = (tmp_path / "secret.key").read_bytes()
    with DelayedS3(tmp_path / "s3", latency_scale=0) as s3:
        objects = s3.store_url(bucket)
        node = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--wal-profile", "local",
                                              "--config", config, "--object-store", objects])
        node.start()
        try:
            s3.outage(True)
            client = pulsar.Client(node.url, operation_timeout_seconds=30,
                                   authentication=pulsar.AuthenticationToken(create_token("admin", secret_key=secret)),
                                   logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            try:
                producer = client.create_producer(topic, batching_enabled=False)
                for value in sent:
                    producer.send(value)
            finally:
                client.close()
            assert upload_lag(node) > 0  # acknowledged from the WAL: nothing reached the store
            yield node, objects, s3, create_token("broker", secret_key=secret)  # a superuser of the config
        finally:
            node.kill()
