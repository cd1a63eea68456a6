"""Schema fields as columns: the Avro -> Spark type mapping and decoding (no Spark job),
then AVRO and JSON topics written by the official client's schema classes, read in batch
and streaming, across schema versions and with undecodable values."""

from __future__ import annotations

import datetime as dt
import enum
import io
import json
import urllib.request
import uuid
from decimal import Decimal

import pytest

pyspark = pytest.importorskip("pyspark")
fastavro = pytest.importorskip("fastavro")

from pyspark.sql.types import (ArrayType, BinaryType, DateType, DecimalType, DoubleType, IntegerType,  # noqa: E402
                               LongType, MapType, StringType, StructField, StructType, TimestampNTZType,
                               TimestampType)

from nereus.lakehouse.schema_columns import TopicSchemas, ValueColumns, ValueDecoder, columns_for  # noqa: E402
from nereus.lakehouse.spark import SCHEMA  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402

EVERYTHING = {
    "type": "record", "name": "Everything", "namespace": "test", "fields": [
        {"name": "id", "type": "long"},
        {"name": "value", "type": "string"},  # a fixed column's name: renamed value_value
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-micros"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "tod", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "either", "type": ["int", "string"]},
        {"name": "node", "type": {"type": "record", "name": "Node", "fields": [
            {"name": "label", "type": "string"}, {"name": "next", "type": ["null", "Node"]}]}},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "scores", "type": {"type": "map", "values": "double"}},
        {"name": "hash", "type": {"type": "fixed", "name": "Hash", "size": 4}},
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
        {"name": "again", "type": "test.Hash"},
    ]}


def test_avro_types_map_to_spark_types():
    columns = {f.name: f.dataType for f in columns_for(json.dumps(EVERYTHING))}
    assert list(columns)[:2] == ["id", "value_value"]
    assert columns == {
        "id": LongType(), "value_value": StringType(), "day": DateType(), "at": TimestampType(),
        "local": TimestampNTZType(), "price": DecimalType(10, 2), "tod": IntegerType(), "uid": StringType(),
        "either": StringType(),
        "node": StructType([StructField("label", StringType(), False), StructField("next", StringType(), True)]),
        "tags": ArrayType(StringType(), True), "scores": MapType(StringType(), DoubleType(), False),
        "hash": BinaryType(), "color": StringType(), "again": BinaryType()}


def _avro(definition: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(definition), record)
    return out.getvalue()


def _decoder(kind: str, definitions: dict[int, dict]) -> ValueDecoder:
    latest = max(definitions)
    schemas = TopicSchemas(kind, {v: json.dumps(d) for v, d in definitions.items()}, latest)
    return ValueDecoder(ValueColumns(tuple(columns_for(schemas.definitions[latest])), schemas))


def test_avro_values_decode():
    uid = str(uuid.uuid4())
    at = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
    record = {"id": 7, "value": "v", "day": dt.date(2024, 1, 2), "at": at, "local": dt.datetime(2024, 1, 2, 3, 4, 5),
              "price": Decimal("12.34"), "tod": dt.time(1, 2, 3), "uid": uid, "either": 5,
              "node": {"label": "a", "next": {"label": "b", "next": None}}, "tags": ["x", None],
              "scores": {"s": 1.5}, "hash": b"abcd", "color": "GREEN", "again": b"wxyz"}
    decode = _decoder("AVRO", {0: EVERYTHING})
    assert decode(_avro(EVERYTHING, record), 0) == (
        7, "v", dt.date(2024, 1, 2), at, dt.datetime(2024, 1, 2, 3, 4, 5), Decimal("12.34"), 3723000, uid, "5",
        ("a", '{"label": "b", "next": null}'), ["x", None], {"s": 1.5}, b"abcd", "GREEN", b"wxyz")
    nothing = (None,) * 15
    assert decode(b"\xff\x01junk", 0) == nothing  # undecodable: null columns
    assert decode(_avro(EVERYTHING, record) + b"more", 0) == nothing  # trailing bytes: not this schema
    assert decode(None, 0) == nothing


def test_fields_named_like_fixed_columns():
    both = {"type": "record", "name": "B", "fields": [{"name": "key", "type": "string"},
                                                     {"name": "value_key", "type": "int"}]}
    assert [f.name for f in columns_for(json.dumps(both))] == ["value_key"]  # the first field keeps the name
    assert _decoder("AVRO", {0: both})(_avro(both, {"key": "k", "value_key": 3}), 0) == ("k",)
    only = {"type": "record", "name": "O", "fields": [{"name": "value_key", "type": "int"}]}
    assert _decoder("AVRO", {0: only})(_avro(only, {"value_key": 3}), 0) == (3,)


def test_each_message_is_decoded_with_its_own_version():
    v0 = {"type": "record", "name": "R", "fields": [{"name": "name", "type": "string"},
                                                   {"name": "count", "type": "int"}]}
    v1 = {"type": "record", "name": "R", "fields": [{"name": "unit", "type": "string", "default": "m"},
                                                   {"name": "name", "type": "string"},
                                                   {"name": "count", "type": "long"}]}
    decode = _decoder("AVRO", {0: v0, 1: v1})
    assert decode(_avro(v0, {"name": "old", "count": 3}), 0) == ("m", "old", 3)  # resolved: v1's default
    assert decode(_avro(v1, {"unit": "s", "name": "new", "count": 4}), 1) == ("s", "new", 4)
    assert decode(_avro(v1, {"unit": "s", "name": "new", "count": 4}), None) == ("s", "new", 4)  # latest


def test_json_values_decode_field_by_field():
    definition = {"type": "record", "name": "J", "fields": [
        {"name": "count", "type": "int"}, {"name": "name", "type": ["null", "string"]},
        {"name": "color", "type": {"type": "enum", "name": "C", "symbols": ["A", "B"]}},
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [{"name": "x", "type": "double"}]}}]}
    decode = _decoder("JSON", {0: definition})
    assert decode(b'{"count": 3, "name": "n", "color": 1, "inner": {"x": 2}}', 0) == (3, "n", "B", (2.0,))
    assert decode(b'{"count": "three", "name": 5, "inner": {}}', 0) == (None, None, None, None)  # misfits
    assert decode(b'{"count": 4294967296}', 0) == (None, None, None, None)  # out of int range
    assert decode(b"[1, 2]", 0) == decode(b"{not json", 0) == (None, None, None, None)


# -- against a standalone ------------------------------------------------------------------------
pulsar = pytest.importorskip("pulsar")
from pulsar.schema import (Array, AvroSchema, Bytes, CustomEnum, Double, Integer, JsonSchema, Map,  # noqa: E402
                           Record, String)


class Color(enum.Enum):
    red = 0
    green = 1


class Inner(Record):
    x = Double()


class Reading(Record):
    name = String()
    count = Integer(required=True)
    tags = Array(String())
    attrs = Map(String())
    inner = Inner()
    data = Bytes()
    color = CustomEnum(Color)


def _reading(i: int) -> Reading:
    return Reading(name=f"n{i}", count=i, tags=[f"t{i}"], attrs={"k": str(i)}, inner=Inner(x=i / 2),
                   data=f"d{i}".encode(), color=Color.green if i % 2 else Color.red)


READING_COLUMNS = ["name", "count", "tags", "attrs", "inner", "data", "color"]


@pytest.fixture(scope="module")
def client(standalone):
    c = pulsar.Client(standalone.url)
    yield c
    c.close()


def _options(node: Standalone, topic: str, **extra: str) -> dict[str, str]:
    return {"metadata": f"oxia://127.0.0.1:{node.ports['oxia']}",
            "objects": (node.data_dir / "objects").resolve().as_uri(), "topic": topic, **extra}


def _read(spark, node: Standalone, topic: str, **extra: str):
    return spark.read.format("nereus").options(**_options(node, topic, **extra)).load()


def _check_reading(row, i: int) -> None:
    assert (row.name, row["count"], row.tags, row.attrs) == (f"n{i}", i, [f"t{i}"], {"k": str(i)})
    assert (row.inner.x, bytes(row.data), row.color) == (i / 2, f"d{i}".encode(), "green" if i % 2 else "red")


@pytest.fixture(scope="module")
def avro_topic(client):
    topic = "persistent://public/default/schema-avro"
    producer = client.create_producer(topic, schema=AvroSchema(Reading), batching_enabled=True,
                                      batching_max_publish_delay_ms=5)
    for i in range(6):
        producer.send_async(_reading(i), None)
    producer.flush()
    producer.close()
    raw = client.create_producer(topic)  # a bytes producer: accepted on a topic with a schema
    raw.send(b"\xff\xfe not avro")
    raw.close()
    return topic


def test_avro_topic_batch(spark, standalone, avro_topic):
    df = _read(spark, standalone, avro_topic)
    assert df.columns == SCHEMA.fieldNames() + READING_COLUMNS
    assert df.schema["inner"].dataType == StructType([StructField("x", DoubleType(), True)])
    rows = sorted(df.collect(), key=lambda r: r.offset)
    assert len(rows) == 7
    for i, row in enumerate(rows[:6]):
        _check_reading(row, i)
    assert [rows[6][c] for c in READING_COLUMNS] == [None] * 7  # undecodable: null columns, no failure
    assert _read(spark, standalone, avro_topic, schemaColumns="false").columns == SCHEMA.fieldNames()


def test_avro_topic_streaming(spark, standalone, avro_topic):
    df = spark.readStream.format("nereus").options(**_options(standalone, avro_topic)).load()
    query = (df.select("offset", "name", "inner").writeStream.format("memory").queryName("schema_stream")
             .trigger(availableNow=True).start())
    assert query.awaitTermination(300), "the availableNow query did not finish"  # bounds a hang only
    rows = sorted(spark.sql("SELECT * FROM schema_stream").collect(), key=lambda r: r.offset)
    assert [(r.name, r.inner.x if r.inner else None) for r in rows] == (
        [(f"n{i}", i / 2) for i in range(6)] + [(None, None)])


def test_json_topic(spark, standalone, client):
    topic = "persistent://public/default/schema-json"
    producer = client.create_producer(topic, schema=JsonSchema(Reading), batching_enabled=False)
    for i in range(4):
        producer.send(_reading(i))
    producer.close()
    df = _read(spark, standalone, topic)
    assert df.columns == SCHEMA.fieldNames() + READING_COLUMNS
    for i, row in enumerate(sorted(df.collect(), key=lambda r: r.offset)):
        _check_reading(row, i)


def test_schema_versions(spark, standalone, client):
    request = urllib.request.Request(f"{standalone.http}/admin/v2/namespaces/public/evolve", method="PUT")
    urllib.request.urlopen(request, timeout=180).close()
    request = urllib.request.Request(f"{standalone.http}/admin/v2/namespaces/public/evolve/schemaCompatibilityStrategy",
                                     data=b'"ALWAYS_COMPATIBLE"', method="PUT",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=180).close()
    topic = "persistent://public/evolve/versions"

    class Sample(Record):  # version 0
        name = String()
        count = Integer(required=True)

    first = Sample
    producer = client.create_producer(topic, schema=AvroSchema(first), batching_enabled=False)
    producer.send(first(name="old", count=1))
    producer.close()

    class Sample(Record):  # noqa: F811 - version 1: a new first field, so v0 bytes misread as v1 fail
        unit = String(required=True)
        name = String()
        count = Integer(required=True)

    producer = client.create_producer(topic, schema=AvroSchema(Sample), batching_enabled=False)
    producer.send(Sample(unit="kg", name="new", count=2))
    producer.close()

    df = _read(spark, standalone, topic)
    assert df.columns == SCHEMA.fieldNames() + ["unit", "name", "count"]
    got = [(r.unit, r.name, r["count"]) for r in sorted(df.collect(), key=lambda r: r.offset)]
    assert got == [(None, "old", 1), ("kg", "new", 2)]  # v0 read with v0 (no default for unit: null)
