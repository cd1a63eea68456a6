"""A topic exists the moment a Kafka client creates it: its stats, internal stats and subscriptions answer
(with zeros) through the admin API, its CLI and the console before anything is written to it."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from nereus.ledger.naming import TopicName
from nereus.meta import connect
from nereus.topics import create_partitioned_topic

NEREUS = [sys.executable, "-m", "nereus.cli"]


def _get(broker, path: str):
    with urllib.request.urlopen(broker.http + path, timeout=15) as response:
        return json.loads(response.read())


def _assert_empty_and_answering(broker, topic: str, partitions: int) -> None:
    admin = subprocess.run([*NEREUS, "admin", "--url", broker.http, "topics", "partitioned-stats", topic,
                            "--per-partition", "--json"],
                           capture_output=True, text=True, timeout=60)
    assert admin.returncode == 0, admin.stderr
    stats = json.loads(admin.stdout)
    assert stats["metadata"]["partitions"] == partitions and stats["msgInCounter"] == 0
    assert len(stats["partitions"]) == partitions
    path = f"/admin/v2/persistent/public/default/{topic}"
    for i in range(partitions):
        assert _get(broker, f"{path}-partition-{i}/stats")["msgInCounter"] == 0
        assert _get(broker, f"{path}-partition-{i}/internalStats")["numberOfEntries"] == 0
        assert _get(broker, f"{path}-partition-{i}/subscriptions") == []
    assert _get(broker, f"{path}/subscriptions") == []
    console = _get(broker, f"/console/api/stats/persistent/public/default/{topic}?partitioned=true")
    assert console["metadata"]["partitions"] == partitions and console["storageSize"] == 0


def test_kafka_created_topics_answer_stats_before_any_write(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    single = topic + "-one"
    for future in admin.create_topics([NewTopic(topic, 3, 1), NewTopic(single, 1, 1)]).values():
        future.result(timeout=30)
    _assert_empty_and_answering(broker, topic, 3)
    _assert_empty_and_answering(broker, single, 1)
    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=30)
    _assert_empty_and_answering(broker, topic, 5)


def test_a_partitioned_topic_declared_without_its_partition_streams_answers_too(broker, topic):
    """Partitioned topics declared before partitions were created with them (metadata only)."""

    async def declare() -> None:
        meta = connect(f"oxia://127.0.0.1:{broker.ports['oxia']}")
        try:
            assert await create_partitioned_topic(meta, TopicName.parse(f"persistent://public/default/{topic}"), 2)
        finally:
            await meta.close()

    asyncio.run(declare())
    _assert_empty_and_answering(broker, topic, 2)
