"""The broker's compaction schedule: a standalone with a short schedule compacts on
its own and the topic's built-in Iceberg table shows the records."""

from __future__ import annotations

import time

import pytest

pulsar = pytest.importorskip("pulsar")
pytest.importorskip("pyiceberg")

from nereus.lakehouse import sbt  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402

TOPIC = "persistent://public/default/scheduled"


def test_the_broker_schedule_compacts_and_fills_the_sbt_table(tmp_path):
    node = Standalone(tmp_path / "data", ["--compaction-interval", "2", "--compaction-max-age", "2",
                                          "--compaction-min-mb", "100"])
    node.start()
    try:
        client = pulsar.Client(node.url)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for i in range(60):
            producer.send(b"m-%d" % i)
        objects = (node.data_dir / "objects").resolve().as_uri()
        catalog_db = node.data_dir / "iceberg" / "catalog.db"
        deadline = time.monotonic() + 120
        covered = 0
        while time.monotonic() < deadline:
            producer.send(b"tick")  # steady traffic: slices reach the index
            if catalog_db.exists():
                try:
                    table = sbt.open_catalog(f"sqlite:///{catalog_db}", objects + "/iceberg").load_table(
                        sbt.identifier(TOPIC))
                    ranges = sbt.read_offsets(table).get("-1", [])
                    covered = ranges[0][1] if ranges else 0
                except Exception:  # the worker has not created the table yet
                    covered = 0
                if covered >= 60:
                    break
            time.sleep(0.5)
        assert covered >= 60, f"{node.log.read_text()[-3000:]}"
        rows = table.scan().to_arrow().sort_by("offset")
        assert rows.column("offset").to_pylist() == list(range(covered))
        assert rows.column("value").to_pylist()[:60] == [b"m-%d" % i for i in range(60)]
        client.close()
    finally:
        node.stop()
