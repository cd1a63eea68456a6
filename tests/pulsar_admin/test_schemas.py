"""Schema registry: the official client's pulsar.schema types, compatibility, and the REST paths."""

from __future__ import annotations

import json
import uuid

import pytest

schema = pytest.importorskip("pulsar.schema")
pytest.importorskip("fastavro")


def _schema_path(topic: str) -> str:
    return "/schemas/" + topic.split("://", 1)[1] + "/schema"


def _user(**extra):
    """A Record class named ``User`` (Avro compares record names) with fields a, b and ``extra``."""
    return type("User", (schema.Record,), dict(a=schema.String(), b=schema.Integer(), **extra))


def test_json_schema_round_trip_and_versions(admin, client, topic):
    user = _user()
    producer = client.create_producer(topic, schema=schema.JsonSchema(user))
    consumer = client.subscribe(topic, "s", schema=schema.JsonSchema(user))
    producer.send(user(a="x", b=1))
    msg = consumer.receive(timeout_millis=10000)
    assert (msg.value().a, msg.value().b) == ("x", 1)

    stored = admin.ok("GET", _schema_path(topic))
    assert stored["type"] == "JSON" and stored["version"] == 0
    assert json.loads(stored["data"])["fields"][0]["name"] == "a"
    # The same schema again reuses its version.
    client.create_producer(topic, schema=schema.JsonSchema(user)).close()
    assert admin.ok("GET", _schema_path(topic))["version"] == 0
    assert [s["version"] for s in admin.ok("GET", _schema_path(topic) + "s")["getSchemaResponses"]] == [0]


def test_avro_evolution_and_incompatible_schema(admin, client, topic, pulsar):
    v1 = _user()
    client.create_producer(topic, schema=schema.AvroSchema(v1)).send(v1(a="one", b=1))
    # A new field with a default: readable both ways (Pulsar's default FULL strategy).
    v2 = _user(c=schema.String(required_default=True))
    producer = client.create_producer(topic, schema=schema.AvroSchema(v2))
    producer.send(v2(a="two", b=2, c="c"))
    assert admin.ok("GET", _schema_path(topic))["version"] == 1
    assert admin.ok("GET", _schema_path(topic) + "/0")["version"] == 0

    # A new field without a default cannot read older data: refused.
    bad = _user(d=schema.String())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=schema.AvroSchema(bad))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=schema.StringSchema())
    assert admin.ok("GET", _schema_path(topic))["version"] == 1

    reader = client.subscribe(topic, "r", schema=schema.AvroSchema(v2),
                              initial_position=pulsar.InitialPosition.Earliest)
    values = [reader.receive(timeout_millis=10000).value() for _ in range(2)]
    assert [(v.a, v.b) for v in values] == [("one", 1), ("two", 2)]
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "bad", schema=schema.AvroSchema(bad))


def test_backward_strategy_allows_removing_a_field(admin, client, pulsar):
    ns = f"public/sch-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    topic = f"persistent://{ns}/t"
    client.create_producer(topic, schema=schema.JsonSchema(_user())).close()
    smaller = type("User", (schema.Record,), dict(a=schema.String()))
    with pytest.raises(pulsar.IncompatibleSchema):  # FULL: old readers need b
        client.create_producer(topic, schema=schema.JsonSchema(smaller))
    admin.ok("PUT", f"/namespaces/{ns}/schemaCompatibilityStrategy", "BACKWARD")
    client.create_producer(topic, schema=schema.JsonSchema(smaller)).close()
    assert admin.ok("GET", _schema_path(topic))["version"] == 1


def test_string_schema_and_bytes_producers(admin, client, topic):
    producer = client.create_producer(topic, schema=schema.StringSchema())
    consumer = client.subscribe(topic, "s", schema=schema.StringSchema())
    producer.send("héllo")
    assert consumer.receive(timeout_millis=10000).value() == "héllo"
    assert admin.ok("GET", _schema_path(topic))["type"] == "STRING"
    client.create_producer(topic).send(b"raw bytes are still accepted")
    assert consumer.receive(timeout_millis=10000).data() == b"raw bytes are still accepted"


def test_rest_post_delete_and_errors(admin, client, topic, pulsar):
    definition = json.dumps(_user().schema())
    path = _schema_path(topic)
    assert admin.get(path) == (404, {"reason": "Schema not found"})
    assert admin.ok("POST", path, {"type": "AVRO", "schema": definition, "properties": {"k": "v"}}) == {
        "version": {"version": 0}}
    assert admin.ok("GET", path)["properties"] == {"k": "v"}
    assert admin.ok("POST", path, {"type": "AVRO", "schema": definition})["version"] == {"version": 0}
    assert admin.post(path, {"type": "JSON", "schema": definition})[0] == 409
    assert admin.post(path, {"type": "AVRO", "schema": "{not avro"})[0] == 422
    assert admin.post(path, {"type": "NOPE", "schema": ""})[0] == 400
    compat = admin.ok("POST", path.rsplit("/", 1)[0] + "/compatibility",
                      {"type": "AVRO", "schema": json.dumps(_user(d=schema.String()).schema())})
    assert compat == {"isCompatibility": False, "schemaCompatibilityStrategy": "FULL"}

    # A producer with the posted schema gets its version.
    user = _user()
    producer = client.create_producer(topic, schema=schema.AvroSchema(user))
    producer.send(user(a="x", b=1))
    assert admin.ok("DELETE", path) == {"version": 1}
    assert admin.get(path) == (404, {"reason": "Schema is deleted"})
    # After deletion any schema may be registered again.
    assert admin.ok("POST", path, {"type": "STRING", "schema": ""})["version"] == {"version": 2}


def test_get_schema_commands_on_the_wire(admin, standalone, topic):
    """GET_SCHEMA / GET_OR_CREATE_SCHEMA, which the Java client's AUTO schemas use."""
    from nereus.codec.pulsar import pb, wrap
    from tests.pulsar_broker.rawclient import RawClient

    raw = RawClient(standalone.pulsar_port)
    try:
        raw.connect()
        raw.send(wrap(pb.CommandGetSchema(request_id=1, topic=topic)))
        assert raw.expect("GET_SCHEMA_RESPONSE").error_code == pb.TopicNotFound
        definition = json.dumps(_user().schema()).encode()
        avro = pb.Schema(name=topic, schema_data=definition, type=pb.Schema.Type.Value("Avro"))
        raw.send(wrap(pb.CommandGetOrCreateSchema(request_id=2, topic=topic, schema=avro)))
        created = raw.expect("GET_OR_CREATE_SCHEMA_RESPONSE")
        assert not created.HasField("error_code") and created.schema_version == (0).to_bytes(8, "big")
        raw.send(wrap(pb.CommandGetSchema(request_id=3, topic=topic + "-partition-0")))
        got = raw.expect("GET_SCHEMA_RESPONSE")
        assert got.schema.schema_data == definition and got.schema_version == created.schema_version
        bad = pb.Schema(name=topic, schema_data=b"", type=pb.Schema.Type.Value("String"))
        raw.send(wrap(pb.CommandGetOrCreateSchema(request_id=4, topic=topic, schema=bad)))
        assert raw.expect("GET_OR_CREATE_SCHEMA_RESPONSE").error_code == pb.IncompatibleSchema
    finally:
        raw.close()
    assert admin.ok("GET", _schema_path(topic))["type"] == "AVRO"


def test_key_value_schemas_are_checked_part_by_part(standalone):
    """A KEY_VALUE schema ([length][key schema][length][value schema], part types in its
    properties) is checked key against key and value against value (FULL by default)."""
    import struct

    from nereus.codec.pulsar import pb, wrap
    from tests.pulsar_broker.rawclient import RawClient

    topic = f"persistent://public/default/kv-{uuid.uuid4().hex[:8]}"

    def kv(key_fields: dict, value_fields: dict) -> pb.Schema:
        parts = [json.dumps(type(name, (schema.Record,), fields).schema()).encode()
                 for name, fields in (("Key", key_fields), ("Value", value_fields))]
        data = b"".join(struct.pack(">i", len(p)) + p for p in parts)
        props = [pb.KeyValue(key="key.schema.type", value="AVRO"), pb.KeyValue(key="value.schema.type", value="AVRO"),
                 pb.KeyValue(key="kv.encoding.type", value="SEPARATED")]
        return pb.Schema(name=topic, schema_data=data, type=pb.Schema.Type.Value("KeyValue"), properties=props)

    base = dict(a=schema.String(), b=schema.String())
    raw = RawClient(standalone.pulsar_port)
    try:
        raw.connect()

        def register(request_id: int, s: pb.Schema) -> int | None:
            raw.send(wrap(pb.CommandGetOrCreateSchema(request_id=request_id, topic=topic, schema=s)))
            got = raw.expect("GET_OR_CREATE_SCHEMA_RESPONSE")
            return got.error_code if got.HasField("error_code") else None

        assert register(1, kv(base, base)) is None
        # a value field added with a default: compatible both ways
        assert register(2, kv(base, dict(base, c=schema.String(required_default=True)))) is None
        # a key field added without a default: the key schema cannot read old keys
        assert register(3, kv(dict(base, k=schema.String()), base)) == pb.IncompatibleSchema
        # the same change on the value side is refused too
        assert register(4, kv(base, dict(base, d=schema.String()))) == pb.IncompatibleSchema
    finally:
        raw.close()
