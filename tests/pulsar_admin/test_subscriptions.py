"""Subscriptions over REST with a connected official client: create, reset cursor, skip, delete."""

from __future__ import annotations

import time

import pytest

from .conftest import rest_path, wait_until


def _produce(client, topic, count, prefix=b"m"):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(prefix + b"%d" % i) for i in range(count)]
    producer.close()
    return ids


def _backlog(admin, topic, sub):
    return admin.ok("GET", rest_path(topic) + "/stats")["subscriptions"][sub]["msgBacklog"]


def test_create_subscription_at_positions(admin, client, topic):
    _produce(client, topic, 5)
    base = rest_path(topic)
    assert admin.put(f"{base}/subscription/from-start", {"ledgerId": -1, "entryId": -1, "partitionIndex": -1})[0] == 204
    assert admin.put(f"{base}/subscription/from-end")[0] == 204  # default: latest
    assert admin.put(f"{base}/subscription/from-end")[1] == {"reason": "Subscription already exists for topic"}
    assert admin.ok("GET", f"{base}/subscriptions") == ["from-end", "from-start"]
    assert _backlog(admin, topic, "from-start") == 5 and _backlog(admin, topic, "from-end") == 0

    consumer = client.subscribe(topic, "from-start")
    assert [consumer.receive(timeout_millis=10000).data() for _ in range(5)] == [b"m%d" % i for i in range(5)]
    assert admin.put("/persistent/public/no-such-ns/t/subscription/x")[0] == 404


def test_reset_cursor_by_time_rereads(admin, client, topic):
    _produce(client, topic, 3, b"old")
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    _produce(client, topic, 3, b"new")
    consumer = client.subscribe(topic, "sub")  # at the end: the reset moves it back
    admin.ok("POST", f"{rest_path(topic)}/subscription/sub/resetcursor/0")
    got = [consumer.receive(timeout_millis=10000) for _ in range(6)]
    assert [m.data() for m in got] == [b"old0", b"old1", b"old2", b"new0", b"new1", b"new2"]
    for m in got:
        consumer.acknowledge(m)
    wait_until(lambda: _backlog(admin, topic, "sub") == 0)

    # Back to the middle: the connected consumer is moved and re-reads the newer half.
    admin.ok("POST", f"{rest_path(topic)}/subscription/sub/resetcursor/{middle}")
    again = [consumer.receive(timeout_millis=10000).data() for _ in range(3)]
    assert again == [b"new0", b"new1", b"new2"]
    assert admin.post(f"{rest_path(topic)}/subscription/nope/resetcursor/0") == (
        404, {"reason": "Subscription not found"})


def test_reset_cursor_by_message_id(admin, client, topic):
    ids = _produce(client, topic, 6)
    admin.ok("PUT", f"{rest_path(topic)}/subscription/s", {"ledgerId": -1, "entryId": -1})
    target = ids[4]
    mid = {"ledgerId": target.ledger_id(), "entryId": target.entry_id(), "partitionIndex": -1}
    admin.ok("POST", f"{rest_path(topic)}/subscription/s/resetcursor", mid)
    consumer = client.subscribe(topic, "s")
    assert consumer.receive(timeout_millis=10000).data() == b"m4"
    consumer.close()
    admin.ok("POST", f"{rest_path(topic)}/subscription/s/resetcursor", dict(mid, isExcluded=True))
    consumer = client.subscribe(topic, "s")
    assert consumer.receive(timeout_millis=10000).data() == b"m5"
    assert admin.post(f"{rest_path(topic)}/subscription/s/resetcursor", [1])[0] == 400


def test_skip_messages(admin, client, topic, pulsar):
    admin.ok("PUT", f"{rest_path(topic)}/subscription/s")
    _produce(client, topic, 10)
    admin.ok("POST", f"{rest_path(topic)}/subscription/s/skip/3")
    assert _backlog(admin, topic, "s") == 7
    consumer = client.subscribe(topic, "s")
    first = consumer.receive(timeout_millis=10000)
    assert first.data() == b"m3"
    consumer.acknowledge(first)
    admin.ok("POST", f"{rest_path(topic)}/subscription/s/skip_all")
    assert _backlog(admin, topic, "s") == 0
    internal = admin.ok("GET", rest_path(topic) + "/internalStats")
    assert internal["cursors"]["s"]["markDeletePosition"].endswith(":9")


def test_delete_subscription(admin, client, topic):
    consumer = client.subscribe(topic, "busy")
    base = rest_path(topic)
    status, body = admin.delete(f"{base}/subscription/busy")
    assert (status, body["reason"]) == (412, "Subscription has active connected consumers")
    consumer.close()
    assert admin.delete(f"{base}/subscription/busy")[0] == 204
    assert admin.ok("GET", f"{base}/subscriptions") == []
    assert admin.delete(f"{base}/subscription/busy")[0] == 404
    client.subscribe(topic, "forced")
    assert admin.delete(f"{base}/subscription/forced?force=true")[0] == 204


@pytest.mark.parametrize("partitions", [3])
def test_partitioned_subscription_ops(admin, client, topic, partitions):
    admin.ok("PUT", rest_path(topic) + "/partitions", partitions)
    admin.ok("PUT", rest_path(topic) + "/subscription/all", {"ledgerId": -1, "entryId": -1})
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(9):
        producer.send(b"p%d" % i, partition_key=str(i))
    assert admin.ok("GET", rest_path(topic) + "/subscriptions") == ["all"]
    consumer = client.subscribe(topic, "all")
    first = sorted(consumer.receive(timeout_millis=10000).data() for _ in range(9))
    admin.ok("POST", rest_path(topic) + "/subscription/all/resetcursor/0")
    again = sorted(consumer.receive(timeout_millis=10000).data() for _ in range(9))
    assert first == again == sorted(b"p%d" % i for i in range(9))
    assert admin.post(rest_path(topic) + "/subscription/all/skip/1")[0] == 405
