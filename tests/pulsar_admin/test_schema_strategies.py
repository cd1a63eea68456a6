"""Every schema compatibility strategy with the official client's Avro and JSON schemas, and the policies around them."""

from __future__ import annotations

import json
import uuid

import pytest

schema = pytest.importorskip("pulsar.schema")
pytest.importorskip("fastavro")

KINDS = {"avro": schema.AvroSchema, "json": schema.JsonSchema}


def _record(**fields):
    """A Record class named ``User`` with ``fields``."""
    return type("User", (schema.Record,), fields)


def _namespace(admin, strategy: str | None = None) -> str:
    ns = f"public/st-{uuid.uuid4().hex[:8]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    if strategy is not None:
        admin.ok("PUT", f"/namespaces/{ns}/schemaCompatibilityStrategy", strategy)
    return ns


def _accepts(client, pulsar, topic: str, kind: str, record) -> bool:
    try:
        client.create_producer(topic, schema=KINDS[kind](record)).close()
    except pulsar.IncompatibleSchema:
        return False
    return True


BASE = dict(a=schema.String(), b=schema.String())
# name -> the second schema, and whether each strategy takes it after BASE.
CHANGES = {
    "add_with_default": _record(**BASE, c=schema.String(required_default=True)),
    "add_without_default": _record(**BASE, c=schema.String()),  # a new reader cannot read old data
    "remove_required": _record(a=schema.String()),  # an old reader cannot read new data: b has no default
}
EXPECTED = {  # strategy -> (add_with_default, add_without_default, remove_required)
    "ALWAYS_COMPATIBLE": (True, True, True),
    "ALWAYS_INCOMPATIBLE": (False, False, False),
    "BACKWARD": (True, False, True),
    "FORWARD": (True, True, False),
    "FULL": (True, False, False),
    "BACKWARD_TRANSITIVE": (True, False, True),
    "FORWARD_TRANSITIVE": (True, True, False),
    "FULL_TRANSITIVE": (True, False, False),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", EXPECTED)
def test_each_strategy_with_avro_resolution(admin, client, pulsar, kind, strategy):
    ns = _namespace(admin, strategy)
    for (change, second), expected in zip(CHANGES.items(), EXPECTED[strategy]):
        topic = f"persistent://{ns}/{change}"
        assert _accepts(client, pulsar, topic, kind, _record(**BASE))
        assert _accepts(client, pulsar, topic, kind, _record(**BASE))  # the same schema: always its version
        assert _accepts(client, pulsar, topic, kind, second) == expected, (strategy, change)


# Three versions where v3 follows v2 but not v1, for each direction.
TRANSITIVE = {
    # new readers: v3's c has no default; v1 data lacks c
    "BACKWARD": [_record(a=schema.String()), _record(a=schema.String(), c=schema.String(required_default=True)),
                 _record(a=schema.String(), c=schema.String())],
    # old readers: v1's b has no default; v3 data lacks b
    "FORWARD": [_record(a=schema.String(), b=schema.String()),
                _record(a=schema.String(), b=schema.String(required_default=True)), _record(a=schema.String())],
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", ["BACKWARD", "FORWARD", "FULL"])
def test_transitive_strategies_check_every_version(admin, client, pulsar, kind, strategy):
    versions = TRANSITIVE["BACKWARD" if strategy == "FULL" else strategy]
    for transitive in (False, True):
        ns = _namespace(admin, strategy + ("_TRANSITIVE" if transitive else ""))
        topic = f"persistent://{ns}/t"
        assert _accepts(client, pulsar, topic, kind, versions[0])
        assert _accepts(client, pulsar, topic, kind, versions[1])
        assert _accepts(client, pulsar, topic, kind, versions[2]) is not transitive
    path = "/schemas/" + topic.split("://", 1)[1] + "/schemas"
    assert len(admin.ok("GET", path)["getSchemaResponses"]) == 2


class Example(schema.Record):
    name = schema.String()
    count = schema.Integer()
    active = schema.Boolean(required=True)


class ExampleRequiredDefault(schema.Record):  # the same fields, each with a default
    active = schema.Boolean(required=True, default=False, required_default=True)
    count = schema.Integer(required_default=True)
    name = schema.String(required_default=True)


class User1(schema.Record):
    name = schema.String()
    age = schema.Integer()


class User2(schema.Record):  # age no longer nullable: old readers read it, new readers not old data
    age = schema.Integer(required=True)
    name = schema.String()


SAMPLES = {Example: {"name": None, "count": None, "active": True}, User1: {"name": "a", "age": 1}}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy, first, second, accepted", [
    ("FULL", Example, ExampleRequiredDefault, True),
    ("FORWARD", User1, User2, True),
    ("FULL", User1, User2, False),
    ("BACKWARD", User1, User2, False),
])
def test_renamed_records_evolve_field_by_field(admin, client, pulsar, kind, strategy, first, second, accepted):
    """Records are resolved field by field whatever they are named, as Pulsar's Avro validators do."""
    topic = f"persistent://{_namespace(admin, strategy)}/evolving"
    producer = client.create_producer(topic, schema=KINDS[kind](first))
    producer.send(first(**SAMPLES[first]))
    assert _accepts(client, pulsar, topic, kind, second) is accepted
    versions = admin.ok("GET", "/schemas/" + topic.split("://", 1)[1] + "/schemas")["getSchemaResponses"]
    assert len(versions) == (2 if accepted else 1)


def test_the_admin_upload_is_refused_with_409_as_a_producer_is(admin, client, pulsar):
    ns = _namespace(admin, "BACKWARD")
    topic = f"persistent://{ns}/t"
    path = f"/schemas/{ns}/t/schema"
    client.create_producer(topic, schema=schema.AvroSchema(_record(**BASE))).close()
    bad = json.dumps(CHANGES["add_without_default"].schema())
    status, reply = admin.post(path, {"type": "AVRO", "schema": bad})
    assert status == 409 and "BACKWARD" in reply["reason"]
    good = json.dumps(CHANGES["remove_required"].schema())
    assert admin.ok("POST", path, {"type": "AVRO", "schema": good}) == {"version": {"version": 1}}


def test_auto_update_disabled_takes_no_new_schema_from_clients(admin, client, pulsar):
    ns = _namespace(admin)
    assert admin.ok("GET", f"/namespaces/{ns}/isAllowAutoUpdateSchema") is True
    admin.ok("POST", f"/namespaces/{ns}/isAllowAutoUpdateSchema", False)
    assert admin.ok("GET", f"/namespaces/{ns}")["is_allow_auto_update_schema"] is False
    topic = f"persistent://{ns}/t"
    v1 = _record(**BASE)
    with pytest.raises(pulsar.IncompatibleSchema):  # not even a first schema
        client.create_producer(topic, schema=schema.AvroSchema(v1))
    # An admin upload still registers; a producer with exactly that schema is then accepted.
    admin.ok("POST", f"/schemas/{ns}/t/schema", {"type": "AVRO", "schema": json.dumps(v1.schema())})
    producer = client.create_producer(topic, schema=schema.AvroSchema(v1))
    producer.send(v1(a="x", b="y"))
    with pytest.raises(pulsar.IncompatibleSchema):  # compatible, but new
        client.create_producer(topic, schema=schema.AvroSchema(CHANGES["add_with_default"]))
    admin.ok("POST", f"/namespaces/{ns}/isAllowAutoUpdateSchema", True)
    client.create_producer(topic, schema=schema.AvroSchema(CHANGES["add_with_default"])).close()
    assert admin.post(f"/namespaces/{ns}/isAllowAutoUpdateSchema", "yes")[0] == 400


def test_older_auto_update_policy_and_the_topic_policy(admin, client, pulsar):
    ns = _namespace(admin)
    topic = f"persistent://{ns}/t"
    assert admin.ok("GET", f"/namespaces/{ns}/schemaAutoUpdateCompatibilityStrategy") == "Full"
    admin.ok("PUT", f"/namespaces/{ns}/schemaAutoUpdateCompatibilityStrategy", "Backward")
    assert admin.put(f"/namespaces/{ns}/schemaAutoUpdateCompatibilityStrategy", "Sideways")[0] == 400
    assert _accepts(client, pulsar, topic, "avro", _record(**BASE))
    assert _accepts(client, pulsar, topic, "avro", CHANGES["remove_required"])  # Backward, not FULL
    # The newer namespace policy wins over the older one; a topic's own policy over both.
    admin.ok("PUT", f"/namespaces/{ns}/schemaCompatibilityStrategy", "ALWAYS_INCOMPATIBLE")
    assert not _accepts(client, pulsar, topic, "avro", _record(a=schema.String(required_default=True)))
    rest = f"/persistent/{ns}/t/schemaCompatibilityStrategy"
    assert admin.get(rest)[0] == 204
    assert admin.ok("GET", rest + "?applied=true") == "ALWAYS_INCOMPATIBLE"
    admin.ok("PUT", rest, "ALWAYS_COMPATIBLE")
    assert admin.ok("GET", rest) == "ALWAYS_COMPATIBLE"
    assert _accepts(client, pulsar, topic, "avro", _record(z=schema.Integer()))
    admin.ok("DELETE", rest)
    assert not _accepts(client, pulsar, topic, "avro", _record(y=schema.Integer()))


def test_protobuf_native_root_message_may_not_change(admin, client, pulsar):
    """PROTOBUF_NATIVE (descriptor sets): Pulsar's rule, checked through the admin upload."""
    ns = _namespace(admin)
    path = f"/schemas/{ns}/t/schema"

    def native(root: str) -> dict:
        data = {"fileDescriptorSet": "", "rootMessageTypeName": root, "rootFileDescriptorName": "user.proto"}
        return {"type": "PROTOBUF_NATIVE", "schema": json.dumps(data)}

    assert admin.ok("POST", path, native("demo.User")) == {"version": {"version": 0}}
    assert admin.post(path, native("demo.Order"))[0] == 409
    admin.ok("PUT", f"/namespaces/{ns}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    assert admin.ok("POST", path, native("demo.Order")) == {"version": {"version": 1}}


def test_the_broker_default_comes_from_the_config_file(tmp_path, pulsar):
    """``schemaCompatibilityStrategy`` in the broker's file applies where no policy says otherwise."""
    import urllib.request

    from tests.standalone_process import Standalone

    conf = tmp_path / "standalone.conf"
    conf.write_text("schemaCompatibilityStrategy=BACKWARD\n")
    server = Standalone(tmp_path / "data", extra_args=["--compaction-interval", "0", "--config", str(conf)])
    server.start()
    client = pulsar.Client(server.url, operation_timeout_seconds=10)
    try:
        topic = f"persistent://public/default/broker-default-{uuid.uuid4().hex[:8]}"
        assert _accepts(client, pulsar, topic, "avro", _record(**BASE))
        # removing a required field: BACKWARD takes it, Pulsar's own default (FULL) would not
        assert _accepts(client, pulsar, topic, "avro", CHANGES["remove_required"])
        assert not _accepts(client, pulsar, topic, "avro", CHANGES["add_without_default"])
        url = f"{server.http}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/schemaCompatibilityStrategy"
        with urllib.request.urlopen(url + "?applied=true", timeout=10) as resp:
            assert json.loads(resp.read()) == "BACKWARD"
    finally:
        client.close()
        server.kill()
