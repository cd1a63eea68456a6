"""Topics over REST, checked against what the official client sees."""

from __future__ import annotations

import uuid

from .conftest import rest_path, wait_until


def _ns(admin) -> str:
    ns = f"public/tp-{uuid.uuid4().hex[:6]}"
    admin.ok("PUT", f"/namespaces/{ns}")
    return ns


def test_create_list_delete_topic(admin):
    ns = _ns(admin)
    topic = f"persistent://{ns}/plain"
    assert admin.put(rest_path(topic))[0] == 204
    assert admin.put(rest_path(topic)) == (409, {"reason": "This topic already exists"})
    assert admin.ok("GET", f"/persistent/{ns}") == [topic]
    assert admin.ok("GET", rest_path(topic) + "/partitions")["partitions"] == 0
    assert admin.delete(rest_path(topic))[0] == 204
    assert admin.delete(rest_path(topic)) == (404, {"reason": "Topic not found"})
    assert admin.ok("GET", f"/persistent/{ns}") == []
    assert admin.get("/persistent/public/no-such-ns")[0] == 404
    assert admin.put("/persistent/public/no-such-ns/t")[1] == {"reason": "Namespace does not exist"}


def test_partitioned_topic_by_rest_then_client(admin, client):
    ns = _ns(admin)
    topic = f"persistent://{ns}/orders"
    assert admin.put(rest_path(topic) + "/partitions", 0)[0] == 406
    assert admin.put(rest_path(topic) + "/partitions", "four")[0] == 400
    assert admin.put(rest_path(topic) + "/partitions", 4)[0] == 204
    assert admin.put(rest_path(topic) + "/partitions", 4)[0] == 409
    assert admin.put(rest_path(topic))[0] == 409
    assert admin.ok("GET", rest_path(topic) + "/partitions")["partitions"] == 4
    assert admin.ok("GET", f"/persistent/{ns}/partitioned") == [topic]
    assert admin.ok("GET", f"/persistent/{ns}") == [f"{topic}-partition-{i}" for i in range(4)]

    consumer = client.subscribe(topic, "all")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(b"o%d" % i, partition_key=f"k{i}")
    got = {consumer.receive(timeout_millis=10000).topic_name() for _ in range(40)}
    assert got == {f"{topic}-partition-{i}" for i in range(4)}
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(4)]

    stats = admin.ok("GET", rest_path(topic) + "/partitioned-stats")
    assert stats["msgInCounter"] == 40 and stats["metadata"] == {"partitions": 4}
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 40
    assert admin.get(rest_path(topic) + "/stats")[0] == 404  # Pulsar: use partitioned-stats
    part = admin.ok("GET", rest_path(topic + "-partition-0") + "/stats")
    assert part["msgInCounter"] > 0 and len(part["publishers"]) == 1

    # Growing the topic: the client's producer and consumer pick up the new partitions.
    assert admin.post(rest_path(topic) + "/partitions", 2)[0] == 422
    admin.ok("POST", rest_path(topic) + "/partitions", 6)
    assert admin.ok("GET", rest_path(topic) + "/partitions")["partitions"] == 6
    assert len(client.get_topic_partitions(topic)) == 6

    status, body = admin.delete(rest_path(topic) + "/partitions")
    assert (status, body["reason"]) == (412, "Topic has active producers/subscriptions")
    producer.close()
    consumer.close()
    admin.ok("DELETE", rest_path(topic) + "/partitions")
    assert admin.ok("GET", f"/persistent/{ns}/partitioned") == []
    assert admin.ok("GET", rest_path(topic) + "/partitions")["partitions"] == 0


def test_force_delete_disconnects_clients(admin, client, pulsar):
    ns = _ns(admin)
    topic = f"persistent://{ns}/busy"
    producer = client.create_producer(topic)
    producer.send(b"before")
    assert admin.delete(rest_path(topic))[0] == 412
    admin.ok("DELETE", rest_path(topic) + "?force=true")
    # The client reconnects and the topic is created again (auto-creation), empty.
    wait_until(lambda: admin.get(rest_path(topic) + "/internalStats")[0] == 200, timeout=15)
    producer.send(b"after")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=10000).data() == b"after"


def test_stats_shapes(admin, client):
    ns = _ns(admin)
    topic = f"persistent://{ns}/stats"
    consumer = client.subscribe(topic, "s1", consumer_name="c1")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"x" * 100)
    msgs = [consumer.receive(timeout_millis=10000) for _ in range(5)]
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[2])

    def settled():
        s = admin.ok("GET", rest_path(topic) + "/stats")
        return s if s["subscriptions"]["s1"]["msgBacklog"] == 3 else None

    stats = wait_until(settled)
    assert stats["msgInCounter"] == 5 and stats["bytesInCounter"] >= 500
    assert stats["storageSize"] >= 500 and stats["publishers"][0]["producerName"] == producer.producer_name()
    sub = stats["subscriptions"]["s1"]
    assert sub["type"] == "Exclusive" and sub["consumers"][0]["consumerName"] == "c1"
    assert sub["msgOutCounter"] == 5 and sub["unackedMessages"] == 3

    internal = admin.ok("GET", rest_path(topic) + "/internalStats")
    assert internal["entriesAddedCounter"] == 5 and internal["numberOfEntries"] == 5
    assert internal["totalSize"] == stats["storageSize"] and internal["currentLedgerSize"] == internal["totalSize"]
    cursor = internal["cursors"]["s1"]
    ledger = internal["ledgers"][0]["ledgerId"]
    assert cursor["markDeletePosition"] == f"{ledger}:0"
    assert cursor["individuallyDeletedMessages"] == f"[({ledger}:1..{ledger}:2]]"
    assert internal["lastConfirmedEntry"] == f"{ledger}:4"
