"""The console's message browser (``/console/api/messages``) over what real Pulsar and Kafka producers wrote."""

from __future__ import annotations

import json
import uuid

import pulsar
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from nereus.broker.console import messages as browser

from .conftest import get_json


class Order(Record):
    id = Integer()
    item = String()


def _messages(node, topic: str, query: str = "") -> dict:
    status, body = get_json(node, f"/console/api/messages/persistent/public/default/{topic}?{query}")
    assert status == 200, body
    return body


def _backlog(node, topic: str, subscription: str) -> int:
    return get_json(node, f"/admin/v2/persistent/public/default/{topic}/stats")[1]["subscriptions"][subscription][
        "msgBacklog"]


@pytest.fixture(scope="module")
def avro_topic(node):
    """30 Avro orders with keys k0..k2 and a property, and a subscription that acknowledges nothing."""
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(node.url)
    consumer = client.subscribe(f"persistent://public/default/{topic}", "keep", schema=AvroSchema(Order))
    producer = client.create_producer(f"persistent://public/default/{topic}", schema=AvroSchema(Order))
    ids = [producer.send(Order(id=i, item=f"item {i}"), partition_key=f"k{i % 3}", properties={"n": str(i)})
           for i in range(30)]
    yield topic, ids
    consumer.close()
    client.close()


def test_latest_messages_decoded_by_the_avro_schema_with_key_properties_and_ids(node, avro_topic):
    topic, ids = avro_topic
    view = _messages(node, topic, "count=5")
    assert view["mode"] == "latest" and view["complete"] and not view["partitioned"]
    got = view["messages"]
    assert [m["offset"] for m in got] == list(range(25, 30))
    assert [m["value"] for m in got] == [{"id": i, "item": f"item {i}"} for i in range(25, 30)]
    assert {m["format"] for m in got} == {"avro"} and {m["schemaVersion"] for m in got} == {0}
    assert [m["key"] for m in got] == [f"k{i % 3}" for i in range(25, 30)]
    assert [m["properties"] for m in got] == [{"n": str(i)} for i in range(25, 30)]
    assert [m["messageId"] for m in got] == [
        f"{i.ledger_id()}:{i.entry_id()}:-1" + (f":{i.batch_index()}" if i.batch_index() >= 0 else "")
        for i in ids[25:]]
    assert all(m["publishTime"] > 0 for m in got)
    assert _backlog(node, topic, "keep") == 30  # browsing moved no cursor


def test_from_an_offset_from_a_time_and_by_key(node, avro_topic):
    topic, _ = avro_topic
    assert [m["offset"] for m in _messages(node, topic, "offset=10&count=3")["messages"]] == [10, 11, 12]
    at = _messages(node, topic, "offset=20&count=1")["messages"][0]["publishTime"]
    since = _messages(node, topic, f"time={at}&count=100")["messages"]
    assert since and all(m["publishTime"] >= at for m in since)
    assert since[0]["offset"] <= 20 and since[-1]["offset"] == 29
    assert all(m["publishTime"] < at for m in _messages(node, topic, "count=100")["messages"]
               if m["offset"] < since[0]["offset"])
    keyed = _messages(node, topic, "key=k1&count=100")["messages"]
    assert [m["offset"] for m in keyed] == list(range(1, 30, 3))
    assert [m["offset"] for m in _messages(node, topic, "key=k1&count=2")["messages"]] == [25, 28]
    assert _messages(node, topic, "key=nobody")["messages"] == []
    assert _backlog(node, topic, "keep") == 30


def test_kafka_records_of_a_partitioned_topic_with_headers_and_a_group_left_as_it_was(node):
    topic, group = f"clicks-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    producer = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(10):
        producer.produce(topic, json.dumps({"n": i}).encode(), key=f"user-{i % 2}".encode(), partition=i % 2,
                         headers=[("source", b"web")])
    producer.produce(topic, b"\x00\xff\x01", key=b"\xfe", partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 3)], asynchronous=False)
    consumer.close()

    view = _messages(node, topic, "count=100")
    assert view["partitioned"] and view["complete"]
    texts = [m for m in view["messages"] if m["format"] == "text"]
    assert sorted((m["partition"], m["offset"]) for m in texts) == sorted((i % 2, i // 2) for i in range(10))
    assert {json.loads(m["value"])["n"] for m in texts} == set(range(10))
    assert all(m["properties"] == {"source": "web"} and m["key"] == f"user-{m['partition']}" for m in texts)
    (binary,) = [m for m in view["messages"] if m["format"] == "hex"]
    assert (binary["value"], binary["key"], binary["keyHex"], binary["partition"], binary["offset"]) == (
        "00ff01", "fe", True, 0, 5)
    one = _messages(node, topic, "partition=1&offset=3&count=10")["messages"]
    assert [(m["partition"], m["offset"]) for m in one] == [(1, 3), (1, 4)]
    assert {m["key"] for m in _messages(node, topic, "key=user-1&count=100")["messages"]} == {"user-1"}
    committed = {(o["partition"], o["committedOffset"]) for o in
                 get_json(node, f"/console/api/kafka/groups/{group}")[1]["offsets"]}
    assert committed == {(0, 2), (1, 3)}  # the group's offsets did not move


def test_json_and_string_schemas_and_values_too_big_to_show_whole(node):
    topic = f"docs-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(node.url)
    try:
        client.create_producer(f"persistent://public/default/{topic}", schema=JsonSchema(Order)).send(
            Order(id=7, item="seven"))
        big = f"big-{uuid.uuid4().hex[:6]}"
        client.create_producer(f"persistent://public/default/{big}", schema=pulsar.schema.StringSchema()).send(
            "x" * 100_000)
    finally:
        client.close()
    (doc,) = _messages(node, topic)["messages"]
    assert (doc["format"], doc["value"]) == ("json", {"id": 7, "item": "seven"})
    (text,) = _messages(node, big)["messages"]
    assert text["format"] == "string" and text["truncated"] and text["size"] == 100_000
    assert len(text["value"]) == 64 * 1024


def test_a_key_filter_reads_at_most_its_budget(node):
    topic = f"large-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=False)
        payload = b"v" * (1 << 20)
        for _ in range(browser.MAX_READ_BYTES // len(payload) + 4):
            producer.send(payload)
    finally:
        client.close()
    view = _messages(node, topic, "key=absent&count=10")
    assert view["messages"] == [] and not view["complete"]
    assert browser.MAX_READ_BYTES <= view["readBytes"] <= browser.MAX_READ_BYTES + (2 << 20)


@pytest.mark.parametrize("query, reason", [
    ("count=0", "count must be at least 1"), ("count=100000", "count must be at most 500"),
    ("offset=x", "offset must be an integer, not 'x'"), ("offset=1&time=2", "give offset or time, not both"),
    ("partition=3", "partition 3 does not exist: the topic has no partitions"),
])
def test_bad_queries_get_a_clear_error(node, avro_topic, query, reason):
    status, body = get_json(node, f"/console/api/messages/persistent/public/default/{avro_topic[0]}?{query}")
    assert (status, body) == (400, {"reason": reason})


def test_unknown_topic_is_404(node):
    assert get_json(node, "/console/api/messages/persistent/public/default/never-created") == (
        404, {"reason": "Topic not found"})
