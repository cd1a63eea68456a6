"""Built-in tables of a standalone whose object store is S3 (a moto server): its own compaction
schedule compacts the topic and commits the table, the broker's Iceberg REST catalog serves it,
and pyiceberg reads the rows back from the compacted objects in the bucket (zero-copy on S3).

Before, a broker on any store but ``file://`` started a worker that refused to run (it had no
catalog), so nothing was ever compacted there.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request

import pytest

pulsar = pytest.importorskip("pulsar")
pytest.importorskip("pyiceberg")
pytest.importorskip("moto")

from pyiceberg.catalog.rest import RestCatalog  # noqa: E402

from nereus.lakehouse import sbt  # noqa: E402
from tests.lakehouse.schedule_node import wait_for  # noqa: E402
from tests.moto_server import BUCKET, CREDENTIALS, MotoServer  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402

TOPIC = "persistent://public/default/s3-events"
PREFIX = "cluster-a"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def node(s3, tmp_path_factory):
    store = f"s3://{BUCKET}/{PREFIX}?" + urllib.parse.urlencode({"endpoint": s3.endpoint, **CREDENTIALS})
    server = Standalone(tmp_path_factory.mktemp("s3-tables") / "data",
                        ["--object-store", store, "--compaction-interval", "1", "--compaction-max-age", "1"])
    server.start()
    yield server
    server.stop()


def rest_catalog(node, s3) -> RestCatalog:
    """The broker's catalog, with what a reader needs to reach the bucket (the catalog vends no credentials)."""
    return RestCatalog("nereus", uri=f"{node.http}/iceberg", **{
        "s3.endpoint": s3.endpoint, "s3.region": CREDENTIALS["region"],
        "s3.access-key-id": CREDENTIALS["access_key_id"], "s3.secret-access-key": CREDENTIALS["secret_access_key"]})


def test_a_standalone_on_s3_compacts_and_serves_the_topics_table(node, s3):
    client = pulsar.Client(node.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        sent = {}
        for i in range(40):
            value = b"event-%d" % i
            producer.send(value, partition_key=f"k{i % 4}", properties={"i": str(i)})
            sent[i] = value
    finally:
        client.close()

    catalog = rest_catalog(node, s3)

    def rows():
        try:
            table = catalog.load_table(sbt.identifier(TOPIC))
        except Exception:  # noqa: BLE001 - no table yet
            return None
        found = table.scan().to_arrow()
        return (table, found) if found.num_rows >= len(sent) else None

    table, found = wait_for(rows, "the table of a topic on S3 holds every record", node)
    assert sorted(zip(found["offset"].to_pylist(), found["value"].to_pylist())) == sorted(sent.items())
    assert [dict(p)["i"] for p in found.sort_by("offset")["properties"].to_pylist()] == [str(i) for i in sent]
    files = [task.file.file_path for task in table.scan().plan_files()]
    assert files and all(f.startswith(f"s3://{BUCKET}/{PREFIX}/compacted/") for f in files), files  # zero-copy
    assert table.metadata.location.startswith(f"s3://{BUCKET}/{PREFIX}/iceberg/")

    with urllib.request.urlopen(f"{node.http}/admin/v2/brokers/configuration/runtime", timeout=15) as response:
        runtime = json.loads(response.read())
    assert runtime["sbtCatalogUri"] == "sqlite:///" + str((node.data_dir / "iceberg" / "catalog.db").resolve())
