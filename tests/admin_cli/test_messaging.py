"""``nereus admin`` on topics that an official client produces to: stats, subscriptions, schemas, unload."""

from __future__ import annotations

import json

from tests.pulsar_admin.conftest import wait_until

from .conftest import Admin


def _produce(client, topic, count):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % i) for i in range(count)]
    producer.close()
    return ids


def _backlog(admin: Admin, topic: str, sub: str) -> int:
    return admin.json("topics", "stats", topic)["subscriptions"][sub]["msgBacklog"]


def test_stats_show_the_messages(admin: Admin, client, namespace):
    topic = f"persistent://{namespace}/stats"
    consumer = client.subscribe(topic, "readers", consumer_name="reader-1")
    _produce(client, topic, 10)
    stats = admin.json("topics", "stats", topic)
    assert stats["msgInCounter"] == 10 and stats["subscriptions"]["readers"]["msgBacklog"] == 10

    table = admin.ok("topics", "stats", topic)
    rows = dict(line.split(None, 1) for line in table.split("\n\n")[0].splitlines()[1:])
    assert rows["msgInCounter"] == "10"
    subscriptions = table.split("Subscriptions\n")[1].split("\n\n")[0].splitlines()
    assert subscriptions[0].split()[:3] == ["SUBSCRIPTION", "TYPE", "MSG_BACKLOG"]
    assert subscriptions[1].split()[:3] == ["readers", "Exclusive", "10"]
    assert "reader-1" in table.split("Consumers\n")[1]

    internal = admin.json("topics", "internal-stats", topic)
    assert internal["numberOfEntries"] == 10
    assert "readers" in admin.ok("topics", "internal-stats", topic).split("Cursors\n")[1]
    consumer.close()


def test_subscriptions_change_the_backlog(admin: Admin, client, namespace):
    topic = f"persistent://{namespace}/subs"
    ids = _produce(client, topic, 10)
    admin.ok("subscriptions", "create", topic, "-s", "from-start", "-m", "earliest")
    admin.ok("topics", "create-subscription", topic, "-s", "from-end")  # pulsar-admin's name; latest
    assert admin.json("subscriptions", "list", topic) == ["from-end", "from-start"]
    assert admin.ok("topics", "subscriptions", topic).split() == ["from-end", "from-start"]
    assert _backlog(admin, topic, "from-start") == 10 and _backlog(admin, topic, "from-end") == 0

    admin.ok("subscriptions", "skip", topic, "-s", "from-start", "-n", "3")
    assert _backlog(admin, topic, "from-start") == 7
    admin.ok("subscriptions", "clear-backlog", topic, "-s", "from-start")
    assert _backlog(admin, topic, "from-start") == 0
    admin.ok("subscriptions", "reset", topic, "-s", "from-start", "-t", "1h")  # reset-cursor's short name
    assert _backlog(admin, topic, "from-start") == 10
    mid = f"{ids[6].ledger_id()}:{ids[6].entry_id()}"
    admin.ok("topics", "reset-cursor", topic, "-s", "from-start", "-m", mid)
    assert _backlog(admin, topic, "from-start") == 4
    admin.ok("subscriptions", "reset-cursor", topic, "-s", "from-start", "-m", mid, "--exclude-reset-position")
    assert _backlog(admin, topic, "from-start") == 3
    consumer = client.subscribe(topic, "from-start")
    assert consumer.receive(timeout_millis=10000).data() == b"m7"

    busy = admin.run("subscriptions", "delete", topic, "-s", "from-start")
    assert busy.exit_code == 1 and busy.stderr == "precondition failed: Subscription has active connected consumers\n"
    admin.ok("subscriptions", "unsubscribe", topic, "-s", "from-start", "--force")
    admin.ok("topics", "unsubscribe", topic, "-s", "from-end")
    assert admin.json("subscriptions", "list", topic) == []
    missing = admin.run("subscriptions", "skip", topic, "-s", "nope", "-n", "1")
    assert missing.exit_code == 1 and missing.stderr == "not found: Subscription not found\n"
    neither = admin.run("subscriptions", "reset-cursor", topic, "-s", "x")
    assert neither.exit_code == 2


def test_schema_upload_get_delete(admin: Admin, client, namespace, tmp_path, pulsar):
    topic = f"persistent://{namespace}/users"

    class User(pulsar.schema.Record):
        _avro_namespace = None
        name = pulsar.schema.String()

    avro = pulsar.schema.AvroSchema(User)
    definition = json.loads(avro.schema_info().schema())  # what the official client will register
    path = tmp_path / "user.json"
    path.write_text(json.dumps({"type": "AVRO", "schema": json.dumps(definition), "properties": {"owner": "ops"}}))
    assert admin.json("schemas", "upload", topic, "-f", str(path)) == {"version": {"version": 0}}
    schema = admin.json("schemas", "get", topic)
    assert schema["type"] == "AVRO" and json.loads(schema["data"]) == definition
    assert schema["properties"] == {"owner": "ops"}
    assert "AVRO" in admin.ok("schemas", "get", topic, "--version", "0")

    # The official client's producer with the same Avro schema is accepted, as version 0.
    producer = client.create_producer(topic, schema=avro)
    producer.send(User(name="ada"))
    producer.close()
    assert admin.json("schemas", "get", topic)["version"] == 0

    admin.ok("schemas", "delete", topic)
    gone = admin.run("schemas", "get", topic)
    assert gone.exit_code == 1 and gone.stderr.startswith("not found: ")
    path.write_text("{not json")
    bad = admin.run("schemas", "upload", topic, "-f", str(path))
    assert bad.exit_code == 1 and bad.stderr.startswith(f"{path} is not valid JSON")


def test_unload_and_the_producer_keeps_sending(admin: Admin, client, namespace, pulsar):
    topic = f"persistent://{namespace}/moving"
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"before")
    admin.ok("topics", "unload", topic)
    producer.send(b"after")
    got = [consumer.receive(timeout_millis=15000) for _ in range(2)]
    assert [m.data() for m in got] == [b"before", b"after"]
    consumer.acknowledge_cumulative(got[-1])
    wait_until(lambda: admin.json("topics", "stats", topic)["subscriptions"]["s"]["msgBacklog"] == 0, timeout=15)
    admin.ok("namespaces", "unload", namespace)  # every topic of the namespace
    producer.send(b"again")
    assert consumer.receive(timeout_millis=15000).data() == b"again"
    missing = admin.run("namespaces", "unload", "public/nope")
    assert missing.exit_code == 1 and missing.stderr.startswith("not found: ")
    wait_until(lambda: admin.json("topics", "stats", topic)["publishers"], timeout=15)


def test_examine_message_prints_a_readable_message(admin: Admin, client, namespace):
    topic = f"persistent://{namespace}/examined"
    producer = client.create_producer(topic, batching_enabled=False, producer_name="examiner")
    first = producer.send("héllo\nworld".encode(), properties={"origin": "test", "n": "1"}, partition_key="k1")
    producer.send(bytes(range(250, 256)) + b"\x00binary", partition_key="k2")
    producer.close()

    text = admin.ok("topics", "examine-message", topic, "--initialPosition", "earliest", "--messagePosition", "1")
    fields = dict(line.split(":", 1) for line in text.splitlines()[:7])
    assert fields["Message ID"].strip() == f"{first.ledger_id()}:{first.entry_id()}"
    assert fields["Key"].strip() == "k1" and fields["Producer"].strip() == "examiner"
    assert fields["Publish time"].strip().endswith("Z")
    assert fields["Properties"].strip() in ("origin=test, n=1", "n=1, origin=test")
    assert fields["Payload"].strip() == "12 bytes, UTF-8 text"
    assert text.splitlines()[-2:] == ["héllo", "world"]

    binary = admin.ok("topics", "examine-message", topic, "--initialPosition", "latest", "--messagePosition", "1")
    assert "Key:" in binary and "k2" in binary and "Payload:" in binary and "13 bytes, hex" in binary
    assert binary.splitlines()[-1] == "00000000  fa fb fc fd fe ff 00 62 69 6e 61 72 79           .......binary"
    second = admin.ok("topics", "examine-message", topic, "-i", "latest", "-m", "2")
    assert "héllo" in second


def test_pulsar_admin_verb_names(admin: Admin, client, namespace):
    topic = f"persistent://{namespace}/verbs"
    _produce(client, topic, 3)
    assert admin.json("topics", "stats-internal", topic)["numberOfEntries"] == 3
    assert "stats-internal" in admin.ok("topics", "--help")
