"""``nereus lakehouse repair`` against a real standalone: the worker's SQL catalog restored from
an older backup (behind), a table dropped by hand (missing), a backup restored after
retention removed data files (ahead: it lists objects the index dropped), and a deleted
topic. Repair brings each table back to exactly the topic's rows, never twice; ``--dry-run``
reports and changes nothing; the compaction worker repairs on its schedule too."""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from pathlib import Path

import pytest

pulsar = pytest.importorskip("pulsar")
pytest.importorskip("pyiceberg")

from click.testing import CliRunner  # noqa: E402

from nereus.lakehouse import sbt  # noqa: E402
from nereus.lakehouse.cli import lakehouse  # noqa: E402
from nereus.lakehouse.repair import repair  # noqa: E402
from nereus.meta import connect  # noqa: E402
from tests.lakehouse.compacting import compact_and_sync, metadata_url, objects_url, worker_catalog  # noqa: E402
from tests.lakehouse.test_deliver import _start  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402

DEADLINE = 180.0


def produce(node, topic: str, first: int, count: int) -> None:
    client = pulsar.Client(node.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(first, first + count):
            producer.send(f"r-{i}".encode(), properties={"i": str(i)})
    finally:
        client.close()


def table_rows(node, topic: str) -> list[tuple[int, int]]:
    """(partition, offset) of every row the table lists, duplicates kept."""
    table = worker_catalog(node).load_table(sbt.identifier(topic))
    scanned = table.scan(selected_fields=("partition", "offset")).to_arrow()
    return sorted(zip(scanned["partition"].to_pylist(), scanned["offset"].to_pylist()))


def truth(node, topic: str) -> list[tuple[int, int]]:
    """(partition, offset) of every record the compacted objects of ``topic``'s offset index hold
    (one record per offset: the producers do not batch). The newest records may still be in the
    WAL; an object partly below a trimmed start is still whole."""

    async def covered():
        meta = connect(metadata_url(node))
        try:
            return sbt.coverage(await sbt.compacted_objects(meta, topic))
        finally:
            await meta.close()

    return sorted((int(p), o) for p, ranges in asyncio.run(covered()).items()
                  for first, end in ranges for o in range(first, end))


def run_repair(node, *extra: str) -> str:
    result = CliRunner().invoke(lakehouse, ["repair", "--metadata", metadata_url(node), "--objects",
                                            objects_url(node), *extra])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def catalog_file(node) -> Path:
    return node.data_dir / "iceberg" / "catalog.db"


def test_a_catalog_behind_or_missing_a_table_is_repaired_without_duplicates(standalone, tmp_path):
    topic = "persistent://public/repair/behind"
    _admin(standalone, "PUT", "/namespaces/public/repair", {})
    produce(standalone, topic, 0, 20)
    assert asyncio.run(compact_and_sync(standalone, topic))
    backup = tmp_path / "catalog.db"
    shutil.copy(catalog_file(standalone), backup)  # a backup of the catalog taken now
    backed_up = table_rows(standalone, topic)
    produce(standalone, topic, 20, 15)
    assert asyncio.run(compact_and_sync(standalone, topic))
    assert table_rows(standalone, topic) == truth(standalone, topic)

    shutil.copy(backup, catalog_file(standalone))  # restored: the later commit is lost
    assert table_rows(standalone, topic) == backed_up != truth(standalone, topic)
    out = run_repair(standalone, "--topic", topic, "--dry-run")
    assert re.search(r"public\.repair\.behind: behind: would be \+[1-9]\d* -0 data files", out), out
    assert table_rows(standalone, topic) == backed_up  # a dry run changes nothing
    out = run_repair(standalone, "--topic", topic)
    assert re.search(r"public\.repair\.behind: behind: \+[1-9]\d* -0", out), out
    assert table_rows(standalone, topic) == truth(standalone, topic)  # 35 rows, each once
    assert "1 in sync, 0 repaired" in run_repair(standalone, "--topic", topic)

    worker_catalog(standalone).drop_table(sbt.identifier(topic))  # dropped by hand
    out = run_repair(standalone)  # no --topic: found from the pins the table left
    assert re.search(r"public\.repair\.behind: missing: \+[1-9]\d* -0", out), out
    assert table_rows(standalone, topic) == truth(standalone, topic)


def test_a_catalog_ahead_of_retention_is_repaired_and_a_deleted_topics_table_dropped(standalone, tmp_path):
    """Retention trims offsets < 12 while the catalog's backup still lists their data file; the
    collector may have deleted it, so the restored table could not even be scanned: repair
    removes it from the table."""
    topic = "persistent://public/repair-ahead/events"
    _admin(standalone, "PUT", "/namespaces/public/repair-ahead", {})
    client = pulsar.Client(standalone.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(12):
            producer.send(f"r-{i}".encode())
        assert asyncio.run(compact_and_sync(standalone, topic))  # object 1: offsets 0..11
        for i in range(12, 20):
            producer.send(f"r-{i}".encode())
        assert asyncio.run(compact_and_sync(standalone, topic))  # object 2: offsets 12..19
        backup = tmp_path / "catalog.db"
        shutil.copy(catalog_file(standalone), backup)
        messages = [consumer.receive(timeout_millis=int(DEADLINE * 1000)) for _ in range(12)]
        consumer.acknowledge_cumulative(messages[-1])
        _admin(standalone, "POST", "/namespaces/public/repair-ahead/retention",
               {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
        deadline = time.monotonic() + DEADLINE
        while _start(standalone, topic) < 12:  # the acknowledgement reaches the cursor asynchronously
            assert time.monotonic() < deadline, "retention did not trim the acknowledged records"
            _admin(standalone, "POST", "/persistent/public/repair-ahead/events/trim")
            time.sleep(0.1)
        producer.close()
        consumer.close()
    finally:
        client.close()
    asyncio.run(_sync(standalone, topic))  # the worker's sync: object 1 leaves the table, its pin goes
    shutil.copy(backup, catalog_file(standalone))  # ... and a restored backup lists it again

    out = run_repair(standalone, "--topic", topic)
    assert re.search(r"public\.repair-ahead\.events: ahead: \+0 -[1-9]", out), out
    assert table_rows(standalone, topic) == truth(standalone, topic)
    assert table_rows(standalone, topic) and (-1, 0) not in table_rows(standalone, topic)  # trimmed object gone

    _admin(standalone, "DELETE", "/persistent/public/repair-ahead/events")
    out = run_repair(standalone, "--dry-run")
    assert f"{topic}: the topic no longer exists: its table would be dropped" in out, out
    assert worker_catalog(standalone).table_exists(sbt.identifier(topic))
    run_repair(standalone)
    assert not worker_catalog(standalone).table_exists(sbt.identifier(topic))
    assert asyncio.run(_pins(standalone, topic)) == []  # the collector may delete its objects now


async def _sync(node, topic: str) -> None:
    meta = connect(metadata_url(node))
    try:
        await sbt.sync(meta, worker_catalog(node), objects_url(node), topic)
    finally:
        await meta.close()


async def _pins(node, topic: str) -> list[str]:
    from nereus.storage import gc

    meta = connect(metadata_url(node))
    try:
        return await gc.pinned_by(meta, sbt.holder(topic))
    finally:
        await meta.close()


def test_a_partitioned_topics_table_is_repaired_by_the_library_call(standalone):
    topic = "persistent://public/repair-parted/parted"
    _admin(standalone, "PUT", "/namespaces/public/repair-parted", {})  # a namespace of its own: any order
    _admin(standalone, "PUT", "/persistent/public/repair-parted/parted/partitions", 2)
    for partition in (0, 1):
        produce(standalone, f"{topic}-partition-{partition}", 0, 30 + partition)
    assert asyncio.run(compact_and_sync(standalone, topic)) >= 2
    worker_catalog(standalone).drop_table(sbt.identifier(topic))

    async def fix():
        meta = connect(metadata_url(standalone))
        try:
            return await repair(meta, worker_catalog(standalone), objects_url(standalone))
        finally:
            await meta.close()

    report = asyncio.run(fix())
    assert [(r.table, r.created, r.stale) for r in report.repaired] == [("public.repair-parted.parted", True, True)]
    assert report.repaired[0].added >= 2
    assert table_rows(standalone, topic) == truth(standalone, topic)
    assert {p for p, _ in table_rows(standalone, topic)} == {0, 1}


def test_a_rest_catalog_behind_or_missing_a_table_is_repaired_without_duplicates(standalone, tmp_path):
    """The same against an Iceberg REST catalog (``tests/iceberg_rest_server.py``): the tables go through
    the REST protocol (loads, commits with their requirements, drops), the catalog's own store is
    restored from a backup underneath it."""
    from tests.iceberg_rest_server import RestCatalogServer

    topic = "persistent://public/repair-rest/events"
    _admin(standalone, "PUT", "/namespaces/public/repair-rest", {})
    server = RestCatalogServer(tmp_path / "rest.db", objects_url(standalone) + "/iceberg", tmp_path / "rest.log")
    uri = server.start()
    try:
        catalog = sbt.store_catalog(uri, objects_url(standalone))

        def compact_and_commit() -> None:
            assert asyncio.run(compact_and_sync(standalone, topic, sync=False))

            async def commit():
                meta = connect(metadata_url(standalone))
                try:
                    await sbt.sync(meta, catalog, objects_url(standalone), topic)
                finally:
                    await meta.close()

            asyncio.run(commit())

        def rows() -> list[tuple[int, int]]:
            scanned = catalog.load_table(sbt.identifier(topic)).scan(selected_fields=("partition", "offset")).to_arrow()
            return sorted(zip(scanned["partition"].to_pylist(), scanned["offset"].to_pylist()))

        produce(standalone, topic, 0, 20)
        compact_and_commit()
        shutil.copy(tmp_path / "rest.db", tmp_path / "backup.db")
        backed_up = rows()
        produce(standalone, topic, 20, 15)
        compact_and_commit()
        assert rows() == truth(standalone, topic)

        shutil.copy(tmp_path / "backup.db", tmp_path / "rest.db")  # the REST catalog's store restored
        assert rows() == backed_up != truth(standalone, topic)
        out = run_repair(standalone, "--catalog", uri, "--topic", topic)
        assert re.search(r"public\.repair-rest\.events: behind: \+[1-9]\d* -0", out), out
        assert rows() == truth(standalone, topic)  # each row once
        assert "1 in sync, 0 repaired" in run_repair(standalone, "--catalog", uri, "--topic", topic)

        catalog.drop_table(sbt.identifier(topic))  # dropped through the REST API
        out = run_repair(standalone, "--catalog", uri)  # found from the pins its table left
        assert re.search(r"public\.repair-rest\.events: missing: \+[1-9]\d* -0", out), out
        assert rows() == truth(standalone, topic)
    finally:
        server.stop()
