"""A stream compacted in many small runs (a frequent schedule for fresh tables): the job merges the
small objects into one, the built-in table then lists the merged object only, and every record
is in it once; the small objects are released to the collector."""

from __future__ import annotations

import asyncio

import pytest

pulsar = pytest.importorskip("pulsar")
pytest.importorskip("pyiceberg")

from nereus.lakehouse import compaction as jobs  # noqa: E402
from nereus.lakehouse import sbt  # noqa: E402
from nereus.storage import compaction  # noqa: E402
from tests.lakehouse.compacting import compact_and_sync, metadata_url, objects_url, worker_catalog  # noqa: E402

TOPIC = "persistent://public/default/sbt-merges"


def _files(node) -> set[str]:
    table = worker_catalog(node).load_table(sbt.identifier(TOPIC))
    return {task.file.file_path for task in table.scan().plan_files()}


def test_small_compacted_objects_are_merged_and_the_table_follows(standalone):
    client = pulsar.Client(standalone.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        small = set()
        sent = 0
        while len(small) < compaction.MIN_MERGE + 1:  # a run per wave: one small object each
            for _ in range(20):
                producer.send(b"r%d" % sent)
                sent += 1
            asyncio.run(compact_and_sync(standalone, TOPIC))
            small = _files(standalone)
        producer.close()
    finally:
        client.close()
    before = worker_catalog(standalone).load_table(sbt.identifier(TOPIC)).scan().to_arrow()
    report = jobs.run_job(None, metadata_url(standalone), objects_url(standalone), topics=[TOPIC],
                          catalog=worker_catalog(standalone))  # small work: in this process, no Spark
    assert report.compacted >= 1
    files = _files(standalone)
    assert not files & small and len(files) < len(small)
    rows = worker_catalog(standalone).load_table(sbt.identifier(TOPIC)).scan().to_arrow()
    offsets = sorted(rows["offset"].to_pylist())
    assert offsets == sorted(set(offsets))  # once each
    assert set(before["offset"].to_pylist()) <= set(offsets)
    assert sorted(rows["value"].to_pylist()) == sorted(b"r%d" % o for o in offsets)
