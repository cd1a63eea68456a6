"""An AVRO topic's built-in table (SBT) against a real standalone: the schema's fields are columns
of the compacted objects and of the Iceberg table, and a compatible schema change that adds a
field adds the column without rewriting the files already in the table."""

from __future__ import annotations

import asyncio

import pytest

pulsar = pytest.importorskip("pulsar")
pytest.importorskip("pyiceberg")

from pulsar.schema import AvroSchema, Integer, Record, String  # noqa: E402

from nereus.lakehouse import sbt, table_format  # noqa: E402
from tests.lakehouse.compacting import compact_and_sync, worker_catalog  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402

TOPIC = "persistent://public/default/sbt-avro-orders"


def test_schema_fields_are_table_columns_and_an_added_field_adds_one(standalone):
    _admin(standalone, "PUT", "/persistent/public/default/sbt-avro-orders")
    _admin(standalone, "PUT", "/persistent/public/default/sbt-avro-orders/schemaCompatibilityStrategy",
           "ALWAYS_COMPATIBLE")  # pulsar-client's Record gives the added field no default, which FULL rejects
    client = pulsar.Client(standalone.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        class Order(Record):
            name = String()
            amount = Integer(required=True)

        producer = client.create_producer(TOPIC, schema=AvroSchema(Order), batching_enabled=False)
        for i in range(30):
            producer.send(Order(name=f"o{i}", amount=i))
        producer.close()
        assert asyncio.run(compact_and_sync(standalone, TOPIC))
        table = worker_catalog(standalone).load_table(sbt.identifier(TOPIC))
        names = [f.name for f in table.schema().fields]
        assert names[:len(table_format.RECORD_COLUMNS)] == list(table_format.RECORD_COLUMNS)
        assert {"name", "amount"} <= set(names) and not set(table_format.ENTRY_COLUMNS) & set(names)
        rows = {r["offset"]: (r["name"], r["amount"]) for r in table.scan().to_arrow().to_pylist()}
        assert rows and all(rows[o] == (f"o{o}", o) for o in rows)
        before = {task.file.file_path for task in table.scan().plan_files()}

        class Order(Record):  # noqa: F811 - the next version adds a field
            name = String()
            amount = Integer(required=True)
            note = String()

        producer = client.create_producer(TOPIC, schema=AvroSchema(Order), batching_enabled=False)
        for i in range(30, 60):
            producer.send(Order(name=f"o{i}", amount=i, note=f"n{i}"))
        producer.close()
    finally:
        client.close()
    assert asyncio.run(compact_and_sync(standalone, TOPIC))
    table = worker_catalog(standalone).load_table(sbt.identifier(TOPIC))
    assert "note" in [f.name for f in table.schema().fields]
    files = {task.file.file_path for task in table.scan().plan_files()}
    assert before < files  # the earlier files are listed as they were: nothing rewritten
    rows = {r["offset"]: (r["name"], r["amount"], r["note"]) for r in table.scan().to_arrow().to_pylist()}
    assert all(rows[o] == (f"o{o}", o, None) for o in rows if o < 30)
    assert all(rows[o] == (f"o{o}", o, f"n{o}") for o in rows if o >= 30) and max(rows) >= 30
