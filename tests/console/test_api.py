"""The console's own JSON (``/console/api``): cluster overview, Kafka groups, built-in tables."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
import uuid

import pulsar
import pytest
from confluent_kafka import Consumer, Producer

from nereus.broker.console import groups, history, tables

from tests.waiting import wait_until

from .conftest import compact_now, get_json


def test_overview_shows_this_broker(node):
    status, view = get_json(node, "/console/api/overview")
    assert status == 200
    assert view["cluster"] == "standalone"
    (broker,) = view["brokers"]
    assert broker["local"] and broker["name"] == view["broker"]
    assert broker["state"] == "active" and broker["zone"] == "default"
    assert broker["httpUrl"] == node.http and broker["kafkaAddress"] == node.bootstrap
    assert isinstance(broker["load"], dict) and isinstance(view["loadedTopics"], int)


def test_since_is_the_brokers_start_not_its_last_registration(node):
    (before,) = get_json(node, "/console/api/overview")[1]["brokers"]
    client = pulsar.Client(node.url)
    try:  # one more owned topic: the broker publishes its new load, registering again
        client.create_producer(f"persistent://public/default/since-{uuid.uuid4().hex[:6]}").send(b"x")
        owned = (before["load"] or {}).get("topics", 0)
        after = wait_until(lambda: next((b for b in get_json(node, "/console/api/overview")[1]["brokers"]
                                        if (b["load"] or {}).get("topics", 0) > owned), None), "the new load published")
    finally:
        client.close()
    assert after["startedMs"] == before["startedMs"] > 0


def _consume_and_commit(node, topic: str, group: str, produced: int, consumed: int, **settings) -> Consumer:
    producer = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(produced):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **settings})
    consumer.subscribe([topic])
    got = 0
    for _ in range(600):
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            got += 1
            if got == consumed:
                break
    assert got == consumed
    consumer.commit(asynchronous=False)
    return consumer


def test_kafka_group_shows_members_committed_offsets_and_lag(node):
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", "billing <service>"
    consumer = _consume_and_commit(node, topic, group, produced=20, consumed=5)
    try:
        status, view = get_json(node, "/console/api/kafka/groups/" + "billing%20%3Cservice%3E")
        assert status == 200
        assert view["groupId"] == group and view["state"] == "Stable" and view["protocolType"] == "consumer"
        assert view["groupType"] == "classic" and view["protocol"] == "range"
        (member,) = view["members"]
        assert member["assignment"] == [{"topic": topic, "partitions": [0]}]
        (offset,) = view["offsets"]
        assert (offset["topic"], offset["partition"]) == (topic, 0)
        assert (offset["committedOffset"], offset["logEndOffset"], offset["lag"]) == (5, 20, 15)
        assert view["totalLag"] == 15
        status, listing = get_json(node, "/console/api/kafka/groups")
        assert status == 200
        assert [g for g in listing["groups"] if g["groupId"] == group] == [view]
    finally:
        consumer.close()
    # Left the group: no members any more, the committed offsets stay.
    deadline = time.monotonic() + 30
    while True:
        status, view = get_json(node, "/console/api/kafka/groups/" + "billing%20%3Cservice%3E")
        if view["state"] == "Empty" or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # polling interval of the wait above
    assert view["members"] == [] and view["state"] == "Empty" and view["offsets"][0]["lag"] == 15


def test_a_kip848_group_is_shown_as_the_consumer_protocol_with_its_members_assignments(node):
    topic, group = f"kip848-{uuid.uuid4().hex[:6]}", f"kip848-{uuid.uuid4().hex[:6]}"
    consumer = _consume_and_commit(node, topic, group, produced=8, consumed=3, **{"group.protocol": "consumer"})
    try:
        view = wait_until(lambda: (lambda v: v["state"] == "Stable" and v)(
            get_json(node, "/console/api/kafka/groups/" + group)[1]), "the group stable")
        assert view["groupType"] == "consumer" and view["protocolType"] == "consumer" and view["leader"] is None
        (member,) = view["members"]
        assert member["assignment"] == [{"topic": topic, "partitions": [0]}]
        (offset,) = view["offsets"]
        assert (offset["committedOffset"], offset["logEndOffset"], offset["lag"]) == (3, 8, 5)
    finally:
        consumer.close()


def _group_committing(node, topic: str, group: str, offsets: dict[int, int], **settings) -> Consumer:
    """A member of ``group`` that received messages of ``topic``, then committed ``offsets`` (partition -> offset)."""
    from confluent_kafka import TopicPartition

    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **settings})
    consumer.subscribe([topic])
    wait_until(lambda: (lambda m: m is not None and m.error() is None)(consumer.poll(0.1)), "a message")
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    return consumer


def test_a_topic_read_only_by_kafka_groups_lists_them_with_their_lag(node):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"readers-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    admin.create_topics([NewTopic(topic, 2)])[topic].result(30)
    producer = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(20):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    classic, kip848 = f"classic-{topic}", f"kip848-{topic}"
    first = _group_committing(node, topic, classic, {0: 2, 1: 10})
    second = _group_committing(node, topic, kip848, {0: 7}, **{"group.protocol": "consumer"})
    try:
        status, view = get_json(node, "/console/api/kafka/topic-groups/public/default/" + topic)
        assert status == 200 and view["topic"] == "persistent://public/default/" + topic
        groups = {g["groupId"]: g for g in view["groups"]}
        assert set(groups) == {classic, kip848}
        assert (groups[classic]["groupType"], groups[kip848]["groupType"]) == ("classic", "consumer")
        lags = {g: [(p["partition"], p["committedOffset"], p["logEndOffset"], p["lag"]) for p in groups[g]["partitions"]]
                for g in groups}
        assert lags == {classic: [(0, 2, 10, 8), (1, 10, 10, 0)], kip848: [(0, 7, 10, 3)]}
        assert (groups[classic]["totalLag"], groups[kip848]["totalLag"]) == (8, 3)
        assert groups[classic]["members"] == groups[kip848]["members"] == 1
        status, stats = get_json(node, f"/admin/v2/persistent/public/default/{topic}/partitioned-stats")
        assert status == 200 and stats["subscriptions"] == {}  # nothing but Kafka groups read it
    finally:
        first.close()
        second.close()
    assert get_json(node, "/console/api/kafka/topic-groups/public/default/never-read") == (
        200, {"topic": "persistent://public/default/never-read", "groups": []})
    assert get_json(node, "/console/api/kafka/topic-groups/public/no%20such/t")[0] == 412


def test_unknown_kafka_group_is_404(node):
    status, body = get_json(node, "/console/api/kafka/groups/no-such-group")
    assert status == 404 and body == {"reason": "Group not found"}


def test_assignment_that_is_not_the_consumer_protocol_decodes_to_none():
    assert groups.decode_assignment(b"\x00\x01\x00\x00\x00\x05ab") is None
    data = b"\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x01t" + b"\x00\x00\x00\x02" + b"\x00\x00\x00\x00\x00\x00\x00\x03"
    assert groups.decode_assignment(data + b"\xff\xff\xff\xff") == [{"topic": "t", "partitions": [0, 3]}]


def test_table_of_unknown_or_invalid_topic(node):
    assert get_json(node, "/console/api/tables/public/default/never-created") == (404, {"reason": "Topic not found"})
    assert get_json(node, "/console/api/tables/public/no%20such/t")[0] == 412


def test_builtin_table_shows_snapshots_data_files_and_covered_offsets(node):
    pytest.importorskip("pyiceberg")  # the lakehouse extra, part of the test extra
    topic = f"persistent://public/default/table-{uuid.uuid4().hex[:6]}"
    path = "/console/api/tables/public/default/" + topic.rsplit("/", 1)[1]
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic)
        for i in range(50):
            producer.send(f"r{i}".encode())
    finally:
        client.close()
    status, before = get_json(node, path)
    assert status == 200
    assert before["table"] == "public.default." + topic.rsplit("/", 1)[1]
    assert before["compactedObjects"] == [] and before["coveredOffsets"] == {}
    assert before["catalog"]["available"] and not before["catalog"]["exists"]
    assert "compaction worker" in before["catalog"]["note"]
    status, no_rows = get_json(node, path + "/rows")
    assert status == 200 and not no_rows["exists"] and "no table yet" in no_rows["note"]

    asyncio.run(compact_now(node, topic))
    status, after = get_json(node, path)
    assert status == 200
    ((first, end),) = after["coveredOffsets"]["-1"]
    assert first == 0 and 0 < end <= 50
    catalog = after["catalog"]
    assert catalog["exists"]
    (snapshot,) = catalog["snapshots"]
    assert snapshot["snapshotId"] == catalog["currentSnapshotId"] and isinstance(snapshot["snapshotId"], str)
    assert snapshot["offsets"] == after["coveredOffsets"] == catalog["offsets"]
    assert snapshot["totalRecords"] == end and snapshot["addedDataFiles"] == catalog["dataFileCount"] >= 1
    assert sum(f["records"] for f in catalog["dataFiles"]) == end
    assert {f["path"].rsplit("/", 1)[1] for f in catalog["dataFiles"]} == {
        o["key"].rsplit("/", 1)[1] for o in after["compactedObjects"]}
    # Its first rows, from the current snapshot.
    status, preview = get_json(node, path + "/rows?limit=5")
    assert status == 200 and preview["exists"] and preview["snapshotId"] == catalog["currentSnapshotId"]
    assert [(r["partition"], r["offset"]) for r in preview["rows"]] == [(-1, i) for i in range(5)]
    assert [r["value"] for r in preview["rows"]] == [
        {"format": "text", "value": f"r{i}", "size": len(f"r{i}"), "truncated": False} for i in range(5)]
    assert all(r["publishTime"] > 0 and r["key"] is None for r in preview["rows"])
    for bad in ("0", "201", "x"):
        assert get_json(node, path + "/rows?limit=" + bad) == (400, {"reason": "limit must be an integer from 1 to 200"})


def test_builtin_table_without_the_lakehouse_extra_says_so(monkeypatch):
    real = tables.importlib.util.find_spec
    monkeypatch.setattr(tables.importlib.util, "find_spec", lambda name, *a: None if name == "pyiceberg" else real(name, *a))
    view = asyncio.run(tables._catalog_view(object(), ("public", "default", "t")))
    assert view == {"available": False, "note": tables.NO_EXTRA}
    assert "lakehouse extra is not installed" in view["note"]


def test_console_page_and_its_assets_come_from_the_broker(node):
    with urllib.request.urlopen(node.http + "/console", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/html")
        html = response.read().decode()
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert any(r.endswith(".js") for r in refs) and any(r.endswith(".css") for r in refs)
    assert all(r.startswith(("/console/static/", "#", "data:")) for r in refs), refs  # nothing from elsewhere
    for ref in refs:
        if ref.startswith("/console/static/"):
            with urllib.request.urlopen(node.http + ref, timeout=30) as response:
                assert response.status == 200 and response.read()


def test_history_serves_the_recent_samples_of_a_topic_and_the_totals(node):
    topic = f"persistent://public/default/history-{uuid.uuid4().hex[:6]}"
    path = "/console/api/history/persistent/public/default/" + topic.rsplit("/", 1)[1]
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic)
        client.subscribe(topic, "history-sub")  # never acknowledges: a backlog
        sent = 0

        def sampled_traffic():
            nonlocal sent
            producer.send(f"m{sent}".encode())
            sent += 1
            samples = get_json(node, path)[1]["samples"]
            return len([s for s in samples if s[1] > 0 and s[3] > 0]) >= 2 and samples

        samples = wait_until(sampled_traffic, "two samples of the topic with traffic and a backlog")
    finally:
        client.close()
    status, body = get_json(node, path)
    assert status == 200 and body["intervalMs"] == 3000
    times = [s[0] for s in samples]
    assert times == sorted(times) and all(t % 3000 == 0 for t in times)
    assert {b - a for a, b in zip(times, times[1:])} <= {3000}
    status, totals = get_json(node, "/console/api/history")
    assert status == 200
    by_time = {s[0]: s for s in totals["samples"]}
    for at, rate_in, _out, backlog in samples:  # the totals include this topic's samples
        if at in by_time:
            assert by_time[at][1] >= rate_in and by_time[at][3] >= backlog
    assert get_json(node, "/console/api/history/persistent/public/no%20such/t")[0] == 412


def test_history_rings_are_bounded():
    ring = history.History(capacity=4, max_topics=2)
    for tick in range(6):
        ring.record(tick * 3000, {"a": (1.0, 2.0, 3.0), "b": (tick + 1.0, 0.0, 0.0), "c": (5.0, 0.0, 0.0)})
    assert ring.series() == [[t * 3000, 7.0 + t, 2.0, 3.0] for t in range(2, 6)]  # the totals count every topic
    assert ring.series(["b"]) == [[t * 3000, t + 1.0, 0.0, 0.0] for t in range(2, 6)]
    assert ring.series(["a", "b"])[-1] == [15000, 7.0, 2.0, 3.0]
    assert ring.series(["c"]) == [[t * 3000, 0.0, 0.0, 0.0] for t in range(2, 6)]  # beyond max_topics
    for tick in range(6, 10):  # "a" and "b" unloaded: zeros, then gone after a whole window, making room for "c"
        ring.record(tick * 3000, {"c": (5.0, 0.0, 0.0)})
    assert ring.series(["a"]) == ring.series(["b"]) == [[t * 3000, 0.0, 0.0, 0.0] for t in range(6, 10)]
    assert ring.series(["c"])[-1] == [27000, 5.0, 0.0, 0.0] and set(ring._rings) == {history.TOTAL, "c"}


def test_idle_topics_take_no_ring():
    ring = history.History(capacity=4, max_topics=2)
    for tick in range(3):  # many idle topics loaded first must not use up the rings
        ring.record(tick * 3000, {**{f"idle-{i}": (0.0, 0.0, 0.0) for i in range(5)}, "busy": (2.0, 0.0, 0.0)})
    assert set(ring._rings) == {history.TOTAL, "busy"}
    assert ring.series(["idle-0"]) == [[t * 3000, 0.0, 0.0, 0.0] for t in range(3)]
    assert ring.series(["busy"])[-1] == [6000, 2.0, 0.0, 0.0]


def test_a_sample_reads_only_the_topics_with_traffic():
    from types import SimpleNamespace

    from nereus.topics.traffic import TopicTraffic

    now = [100.0]

    def core(name: str) -> SimpleNamespace:
        return SimpleNamespace(traffic=TopicTraffic(name, lambda: now[0]), attachments={})

    topics = {f"idle-{i}": core(f"idle-{i}") for i in range(1000)}
    topics["busy"] = core("busy")
    topics["busy"].traffic.published(30, 3000)
    topics["read"] = core("read")
    topics["read"].traffic.delivered("sub", 6, 60)
    sampled = history.sample(SimpleNamespace(topics=topics))
    assert set(sampled) == {"busy", "read"}
    assert sampled["busy"][0] > 0 and sampled["read"][1] > 0
    now[0] += 3600  # quiet for an hour: the busy topic's meter empties, then it is skipped too
    assert history.sample(SimpleNamespace(topics=topics))["busy"] == (0.0, 0.0, 0.0)
    assert "busy" not in history.sample(SimpleNamespace(topics=topics))
