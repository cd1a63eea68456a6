"""``nereus lakehouse deliver --schema-columns`` against a real standalone: an AVRO topic's fields
become table columns, a compatible schema change (an added field) adds a column without
rewriting what was delivered, and a record that is not Avro of the topic's schema goes to
the dead-letter table with the reason, while delivery goes on (Delta, Hudi, Iceberg)."""

from __future__ import annotations

import pyarrow as pa
import pytest

pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")
hudi = pytest.importorskip("hudi")
deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")

from pulsar.schema import AvroSchema, Integer, Record, String  # noqa: E402
from pyiceberg.catalog import load_catalog  # noqa: E402

from tests.lakehouse.test_deliver import DEADLINE, deliver, delivered_count, iceberg_properties  # noqa: E402
from tests.lakehouse.test_deliver import target_args  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402


def read_table(kind: str, tmp_path, name: str) -> pa.Table:
    if kind == "delta":
        return deltalake.DeltaTable(str(tmp_path / name)).to_pyarrow_table()
    if kind == "hudi":
        return pa.Table.from_batches(hudi.HudiTableBuilder.from_base_uri(str(tmp_path / name)).build().read())
    return load_catalog("lake", **iceberg_properties(tmp_path)).load_table(f"streams.{name}").scan().to_arrow()


def data_files(kind: str, tmp_path, name: str) -> set[str]:
    if kind == "delta":
        return set(deltalake.DeltaTable(str(tmp_path / name)).file_uris())
    if kind == "hudi":
        return {p.name for p in (tmp_path / name).glob("*.parquet")}
    table = load_catalog("lake", **iceberg_properties(tmp_path)).load_table(f"streams.{name}")
    return {task.file.file_path for task in table.scan().plan_files()}


def by_offset(table: pa.Table, *columns: str) -> dict[int, tuple]:
    return {row["offset"]: tuple(row.get(c) for c in columns) for row in table.to_pylist()}


@pytest.mark.parametrize("kind", ["delta", "hudi", "iceberg"])
def test_schema_columns_evolve_and_bad_records_go_to_the_dead_letter_table(standalone, tmp_path, kind):
    name = f"sdt-avro-{kind}"
    topic = f"persistent://public/default/{name}"
    _admin(standalone, "PUT", f"/persistent/public/default/{name}/partitions", 1)  # Kafka writes partition 0
    # The added field has no default (pulsar-client's Record gives none), which FULL rejects.
    _admin(standalone, "PUT", f"/persistent/public/default/{name}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    client = pulsar.Client(standalone.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        class Order(Record):
            name = String()
            amount = Integer(required=True)

        producer = client.create_producer(topic, schema=AvroSchema(Order), batching_enabled=False)
        for i in range(4):
            producer.send(Order(name=f"o{i}", amount=i))
        producer.close()
        target = [*target_args(kind, tmp_path, "orders"), "--schema-columns"]
        assert delivered_count(deliver(standalone, topic, target)) == 4
        first = read_table(kind, tmp_path, "orders")
        assert {"name", "amount"} <= set(first.column_names) and "note" not in first.column_names
        assert by_offset(first, "name", "amount") == {i: (f"o{i}", i) for i in range(4)}
        files = data_files(kind, tmp_path, "orders")

        class Order(Record):  # noqa: F811 - version 1 adds a nullable field (backward compatible)
            name = String()
            amount = Integer(required=True)
            note = String()

        producer = client.create_producer(topic, schema=AvroSchema(Order), batching_enabled=False)
        producer.send(Order(name="o4", amount=4, note="gift"))
        kafka = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap})
        kafka.produce(name, value=b"\xff\xfenot avro", partition=0)  # offset 5
        assert kafka.flush(DEADLINE) == 0
        producer.send(Order(name="o6", amount=6, note=None))
        producer.close()
    finally:
        client.close()

    out = deliver(standalone, topic, target)
    assert delivered_count(out) == 3 and "1 records to the dead-letter table" in out
    table = read_table(kind, tmp_path, "orders")
    assert by_offset(table, "name", "amount", "note") == {
        **{i: (f"o{i}", i, None) for i in range(4)}, 4: ("o4", 4, "gift"), 6: ("o6", 6, None)}
    assert files <= data_files(kind, tmp_path, "orders")  # the first delivery's files were not rewritten
    dead = read_table(kind, tmp_path, "orders_dead_letter")
    assert by_offset(dead, "value") == {5: (b"\xff\xfenot avro",)}
    reason = dead.to_pylist()[0]["reason"]
    assert "not Avro of schema version 1" in reason, reason

    out = deliver(standalone, topic, target)  # nothing new: no row twice in either table
    assert delivered_count(out) == 0
    assert read_table(kind, tmp_path, "orders_dead_letter").num_rows == 1
    assert read_table(kind, tmp_path, "orders").num_rows == 6


@pytest.mark.parametrize("kind", ["delta", "hudi", "iceberg"])
def test_a_job_killed_between_the_dead_letter_and_the_table_commit_adds_no_dead_letter_twice(
        standalone, tmp_path, kind):
    from tests.lakehouse.test_deliver import run_killed

    name = f"sdt-dead-{kind}"
    topic = f"persistent://public/default/{name}"
    _admin(standalone, "PUT", f"/persistent/public/default/{name}/partitions", 1)
    client = pulsar.Client(standalone.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        class Reading(Record):
            value = Integer(required=True)

        producer = client.create_producer(topic, schema=AvroSchema(Reading), batching_enabled=False)
        kafka = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap})
        for i in range(9):
            if i % 3 == 1:  # offsets 1, 4, 7
                kafka.produce(name, value=b"\xff", partition=0)  # a varint that never ends
                assert kafka.flush(DEADLINE) == 0
            else:
                producer.send(Reading(value=i))
        producer.close()
    finally:
        client.close()
    target = [*target_args(kind, tmp_path, "readings"), "--schema-columns", "--batch-records", "3"]
    run_killed(standalone, topic, target, "before-commit:2")  # dead letters of batch 2 landed, its rows not
    out = deliver(standalone, topic, target)
    assert "records to the dead-letter table" in out
    dead = read_table(kind, tmp_path, "readings_dead_letter")
    assert sorted(dead["offset"].to_pylist()) == [1, 4, 7]  # each once
    assert sorted(by_offset(read_table(kind, tmp_path, "readings"), "value_value")) == [0, 2, 3, 5, 6, 8]
