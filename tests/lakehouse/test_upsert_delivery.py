"""``nereus lakehouse deliver --upsert``: a key-compacted Kafka topic (``cleanup.policy=compact``,
two partitions) delivered into Delta, Hudi and Iceberg upsert tables against a real standalone.
Each table holds one row per partition and key, its latest record; tombstones delete; runs are
incremental and a job killed at any commit point re-runs to the same table."""

from __future__ import annotations

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("deltalake")
pytest.importorskip("hudi")
pytest.importorskip("pyiceberg")

from click.testing import CliRunner  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from nereus.lakehouse.cli import lakehouse  # noqa: E402
from tests.lakehouse.test_deliver import (DEADLINE, _urls, deliver, delta_rows, hudi_rows,  # noqa: E402
                                          iceberg_rows, run_killed, target_args)

KEYS = 9


class KeyedWrites:
    """Kafka records with keys and tombstones; ``latest``: (partition, key) -> (offset, value)."""

    def __init__(self, node, name: str) -> None:
        self.node = node
        self.name = name
        self.topic = f"persistent://public/default/{name}"
        self.latest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        futures = admin.create_topics([NewTopic(name, 2, 1, config={"cleanup.policy": "compact"})])
        futures[name].result(DEADLINE)

    def wave(self, count: int, tag: str, tombstone_every: int = 0) -> None:
        producer = confluent_kafka.Producer({"bootstrap.servers": self.node.bootstrap, "linger.ms": 5})
        errors = []

        def delivered(err, msg):
            if err is not None:
                errors.append(err)
                return
            slot = (msg.partition(), msg.key())
            if slot not in self.latest or self.latest[slot][0] < msg.offset():
                self.latest[slot] = (msg.offset(), msg.value())

        for i in range(count):
            key = f"key-{i % KEYS}".encode()
            value = None if tombstone_every and i % tombstone_every == 0 else f"{tag}-{i}".encode()
            producer.produce(self.name, value=value, key=key, partition=i % 2, on_delivery=delivered)
        assert producer.flush(DEADLINE) == 0
        assert not errors

    def expected(self) -> dict[tuple[int, bytes], tuple[int, bytes]]:
        return {slot: (offset, value) for slot, (offset, value) in self.latest.items() if value is not None}


def upsert_rows(kind: str, tmp_path, table: str) -> dict[tuple[int, bytes], tuple[int, bytes]]:
    if kind == "iceberg":
        rows = iceberg_rows(tmp_path, f"streams.{table}")
    else:
        rows = (delta_rows if kind == "delta" else hudi_rows)(tmp_path / table)
    out = {}
    for (partition, offset), row in rows.items():
        slot = (partition, row[5])
        assert slot not in out, f"{slot} has two rows"
        out[slot] = (offset, row[6])
    return out


@pytest.mark.parametrize("kind", ["delta", "hudi", "iceberg"])
def test_upsert_tables_hold_the_latest_record_of_each_key(standalone, tmp_path, kind):
    writes = KeyedWrites(standalone, f"upsert-{kind}")
    writes.wave(40, "w1")
    target = [*target_args(kind, tmp_path, "up"), "--upsert"]
    out = deliver(standalone, writes.topic, target, "--batch-records", "7")  # updates across commits
    assert upsert_rows(kind, tmp_path, "up") == writes.expected()
    assert "without a key" not in out

    writes.wave(30, "w2", tombstone_every=4)  # updates, and tombstones for some keys
    deliver(standalone, writes.topic, target, "--batch-records", "5")
    got = upsert_rows(kind, tmp_path, "up")
    assert got == writes.expected()
    assert len(got) < 2 * KEYS  # some keys were deleted

    writes.wave(25, "w3", tombstone_every=3)
    # One record a commit: even once key compaction left only the latest record of each of the
    # wave's 18 (partition, key) pairs, both jobs meet their kill point.
    run_killed(standalone, writes.topic, target, "before-commit:2", "--batch-records", "1")
    run_killed(standalone, writes.topic, target, "after-commit:1", "--batch-records", "1")
    deliver(standalone, writes.topic, target, "--batch-records", "4")
    assert upsert_rows(kind, tmp_path, "up") == writes.expected()


def test_records_without_a_key_are_counted_and_modes_do_not_mix(standalone, tmp_path):
    import pulsar

    writes = KeyedWrites(standalone, "upsert-keyless")
    client = pulsar.Client(standalone.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:  # a Kafka producer cannot write keyless records to a compacted topic; a Pulsar one can
        producer = client.create_producer(f"{writes.topic}-partition-0", batching_enabled=False)
        for _ in range(3):
            producer.send(b"no key")
    finally:
        client.close()
    writes.wave(10, "w1")
    out = deliver(standalone, writes.topic, ["--delta", str(tmp_path / "up"), "--upsert"])
    assert "3 records without a key left out" in out
    assert upsert_rows("delta", tmp_path, "up") == writes.expected()

    # An upsert table is not opened as an append table, nor an append table as an upsert table.
    deliver(standalone, writes.topic, ["--hudi", str(tmp_path / "append")])
    for flipped in (["--delta", str(tmp_path / "up")], ["--hudi", str(tmp_path / "append"), "--upsert"]):
        result = CliRunner().invoke(lakehouse, ["deliver", *_urls(standalone), "--topic", writes.topic, *flipped,
                                                "--once", "--no-progress"])
        assert result.exit_code == 1, result.output
        assert "table, not an" in result.output and "Traceback" not in result.output


def release_below_view(node, name: str) -> None:
    """Build each partition's key view and let retention release the raw records below it, as the
    broker does for a Kafka compact topic on its schedule; waits until the raw streams start there."""
    import json
    import urllib.request

    from tests.standalone_process import admin
    from tests.waiting import wait_until

    for partition in (0, 1):
        path = f"/persistent/public/default/{name}-partition-{partition}"
        admin(node, "PUT", path + "/compaction")

        def built(path=path) -> bool:
            with urllib.request.urlopen(f"{node.http}/admin/v2{path}/compaction", timeout=15) as response:
                status = json.loads(response.read())
            assert status["status"] != "ERROR", status
            return status["status"] == "SUCCESS"

        wait_until(built, f"the key view of {path}", timeout=DEADLINE)
        admin(node, "POST", path + "/trim")


@pytest.mark.parametrize("kind", ["delta", "iceberg"])
def test_records_only_the_key_view_keeps_are_delivered_and_never_deleted(standalone, tmp_path, kind):
    """Once a compact topic's raw records are released below its key view (which Kafka consumers then
    read), delivery reads them from the view: an existing table keeps its rows and gets the newer
    records, and a new table gets every key's latest record."""
    import asyncio

    from nereus.lakehouse import rows
    from nereus.meta import connect

    writes = KeyedWrites(standalone, f"upsert-view-{kind}")
    writes.wave(40, "w1")
    target = [*target_args(kind, tmp_path, "up"), "--upsert"]
    deliver(standalone, writes.topic, target)
    writes.wave(30, "w2", tombstone_every=4)
    release_below_view(standalone, writes.name)

    async def raw_starts():
        meta = connect(f"oxia://127.0.0.1:{standalone.ports['oxia']}")
        try:
            return [r.start for r in await rows.topic_ranges(meta, writes.topic)]
        finally:
            await meta.close()

    assert all(start > 0 for start in asyncio.run(raw_starts()))  # the raw streams were released
    out = deliver(standalone, writes.topic, target)
    assert "trimmed" not in out and " 0 retention deletes" in out, out
    assert upsert_rows(kind, tmp_path, "up") == writes.expected()
    fresh = [*target_args(kind, tmp_path, "fresh"), "--upsert"]
    deliver(standalone, writes.topic, fresh)
    assert upsert_rows(kind, tmp_path, "fresh") == writes.expected()
