"""Spark reads records that are acknowledged on a broker's WAL and not uploaded yet: its tasks find
the WAL service from the metadata plane and show it a broker token (``walAuthParams``); without
one they wait for the upload."""

from __future__ import annotations

import pytest

from nereus.lakehouse.options import wal_access
from tests.lakehouse.wal_outage import records_on_the_wal_only, upload_lag
from tests.standalone_process import Standalone
from tests.waiting import wait_until

TOPIC = "persistent://public/default/spark-wal"


def _values(spark, node: Standalone, objects: str, **options: str) -> list[bytes]:
    reader = (spark.read.format("nereus").option("metadata", f"oxia://127.0.0.1:{node.ports['oxia']}")
              .option("objects", objects).option("topic", TOPIC))
    for key, value in options.items():
        reader = reader.option(key, value)
    return [bytes(row.value) for row in reader.load().orderBy("offset").collect()]


def test_spark_reads_the_wal_while_the_object_store_is_down(spark, tmp_path):
    sent = [b"m%d" % i for i in range(40)]
    with records_on_the_wal_only(tmp_path, "spark-wal", TOPIC, sent) as (node, objects, s3, token):
        assert _values(spark, node, objects, walAuthParams=f"token:{token}") == sent
        assert upload_lag(node) > 0  # read from the WAL service, not the store

        s3.outage(False)  # without credentials the tasks wait for the upload
        assert _values(spark, node, objects) == sent
        wait_until(lambda: upload_lag(node) == 0, "the WAL uploaded", timeout=60)


@pytest.mark.parametrize("options, message", [
    ({"walTlsCertFile": "/c.pem"}, "together"),
    ({"walUploadWaitSeconds": "-1"}, "walUploadWaitSeconds"),
    ({"walUploadWaitSeconds": "soon"}, "walUploadWaitSeconds"),
    ({"walAuthParams": "file:///no/such/token"}, "walAuthParams: no token file"),
])
def test_bad_wal_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        wal_access(options)
