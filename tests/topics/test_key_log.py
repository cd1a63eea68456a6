"""The key log of compacted topics, end to end: a real standalone, the official clients.

A topic records its keys once it is meant to be compacted (a compactionThreshold
policy, ``cleanup.policy=compact``); a build takes the recorded ranges as they are
and reads the rest of the topic. The views must match the model whatever the log
covers: nothing (updates before the policy), everything, or ranges with holes left
by a broker killed (SIGKILL) before its last keys were written down. A build trims
the log below its horizon; deleting the topic deletes the log.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from nereus.meta import connect
from nereus.storage import records
from nereus.storage.records import Tail
from nereus.topics import key_log
from tests import compaction_model as cm
from tests.standalone_process import Standalone

pulsar = pytest.importorskip("pulsar")
pytest.importorskip("confluent_kafka")

UPDATES, KEYS = 3000, 150


@pytest.fixture
def server(tmp_path):
    proc = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--compaction-monitor-interval", "0",
                                          "--session-timeout", "3"])
    proc.start()
    yield proc
    proc.kill()


async def _log_state(metadata: str, topic: str) -> tuple[int, int, int] | None:
    """(stream end of the topic, start and end of its key log), None: the topic has no log."""
    meta = connect(metadata)
    try:
        sid = records.decode((await meta.get(records.name_key(topic))).value)["id"]
        main = await meta.get(records.tail_key(sid), partition_key=records.stream_partition(sid))
        rec = await meta.get(records.name_key(key_log.log_name(sid)))
        if rec is None:
            return None
        lid = records.decode(rec.value)["id"]
        part = records.stream_partition(lid)
        start = await meta.get(records.start_key(lid), partition_key=part)
        tail = await meta.get(records.tail_key(lid), partition_key=part)
        return (Tail.decode(main.value).next, records.decode(start.value)["start"] if start else 0,
                Tail.decode(tail.value).next if tail else 0)
    finally:
        await meta.close()


def log_state(server: Standalone, topic: str):
    return asyncio.run(_log_state(f"oxia://127.0.0.1:{server.ports['oxia']}", topic))


def _has_entries(server: Standalone, topic: str) -> bool:
    state = log_state(server, topic)
    return state is not None and state[2] > state[1]


def set_threshold(server: Standalone, topic: str, value: int) -> None:
    status, body = cm.admin(server.http, "POST", cm.topic_path(topic) + "/compactionThreshold", value)
    assert status == 204, (status, body)


def test_pulsar_views_match_the_model_with_no_full_and_broken_key_logs(server):
    topic = f"persistent://public/default/kl-{uuid.uuid4().hex[:8]}"
    data = cm.updates(UPDATES, KEYS)
    ids: list = [None] * UPDATES
    client = pulsar.Client(server.url, operation_timeout_seconds=30)
    try:
        # Before any policy: nothing recorded, the build reads the topic.
        cm.produce_pulsar(client, topic, data[:1000], ids)
        assert log_state(server, topic) is None
        set_threshold(server, topic, 1 << 40)  # compacted, never automatically here
        cm.produce_pulsar(client, topic, data[1000:2000], ids, first=1000)
        cm.wait_until(lambda: _has_entries(server, topic), "keys recorded")
        cm.compact(server.http, topic)
        assert cm.read_pulsar(client, pulsar, topic, compacted=True) == cm.model(data[:2000], ids[:2000])
        # Every recorded range lies below the new horizon: trimmed.
        cm.wait_until(lambda: (s := log_state(server, topic))[1] == s[2], "the key log trimmed")
    finally:
        client.close()

    # A crash right after the acknowledgements: keys not yet written down leave a hole.
    client = pulsar.Client(server.url, operation_timeout_seconds=30)
    try:
        cm.produce_pulsar(client, topic, data[2000:2500], ids, first=2000)
    finally:
        client.close()
    server.kill()
    server.start()
    client = pulsar.Client(server.url, operation_timeout_seconds=30)
    try:
        cm.produce_pulsar(client, topic, data[2500:], ids, first=2500)
        cm.wait_until(lambda: _has_entries(server, topic), "keys recorded after the restart")
        cm.compact(server.http, topic)
        assert cm.read_pulsar(client, pulsar, topic, compacted=True) == cm.model(data, ids)
        # The raw topic is untouched by all of it.
        assert [m[0] for m in cm.read_pulsar(client, pulsar, topic, compacted=False)] == ids
    finally:
        client.close()
    status, body = cm.admin(server.http, "DELETE", cm.topic_path(topic))
    assert status == 204, (status, body)
    cm.wait_until(lambda: asyncio.run(_log_gone(f"oxia://127.0.0.1:{server.ports['oxia']}")), "the key log deleted")


async def _log_gone(metadata: str) -> bool:
    meta = connect(metadata)
    try:
        lo, hi = records.names_range()
        return not [k async for k in meta.list(lo, hi) if records.name_from_key(k).startswith("internal://keys/")]
    finally:
        await meta.close()


def test_kafka_compact_topic_records_its_keys_and_views_match_the_model(server):
    topic = f"kl-{uuid.uuid4().hex[:8]}"
    cm.create_compacted_topic(server.bootstrap, topic, **{"delete.retention.ms": "0"})
    data = cm.updates(UPDATES, KEYS)
    offsets: list = [None] * UPDATES
    cm.produce_kafka(server.bootstrap, topic, data[:2000], offsets)
    stream = f"persistent://public/default/{topic}-partition-0"
    cm.wait_until(lambda: _has_entries(server, stream), "keys recorded")
    cm.compact(server.http, topic)
    cm.produce_kafka(server.bootstrap, topic, data[2000:], offsets, first=2000)
    cm.wait_until(lambda: (s := log_state(server, stream)) is not None and s[2] > s[1], "more keys recorded")
    cm.compact(server.http, topic)
    last = {k: i for i, (k, _) in enumerate(data)}
    expected = [(offsets[i], k, v) for i, (k, v) in enumerate(data) if v is not None and last[k] == i]
    assert cm.read_kafka(server.bootstrap, topic) == expected


def test_each_partition_of_a_partitioned_topic_records_its_keys(server):
    topic = f"persistent://public/default/klp-{uuid.uuid4().hex[:8]}"
    status, body = cm.admin(server.http, "PUT", cm.topic_path(topic) + "/partitions", 3)
    assert status == 204, (status, body)
    set_threshold(server, topic, 1 << 40)  # on the base name: every partition's policy
    data = cm.updates(1500, 60)
    client = pulsar.Client(server.url, operation_timeout_seconds=30)
    try:
        cm.produce_pulsar(client, topic, data)
        for i in range(3):
            cm.wait_until(lambda i=i: _has_entries(server, f"{topic}-partition-{i}"), f"keys of partition {i}")
        cm.compact(server.http, topic)
        seen = {}
        for i in range(3):
            for _, key, value in cm.read_pulsar(client, pulsar, f"{topic}-partition-{i}", compacted=True):
                assert key not in seen
                seen[key] = value
    finally:
        client.close()
    latest = {}
    for key, value in data:
        latest[key] = value
    assert seen == {k: v for k, v in latest.items() if v is not None}
