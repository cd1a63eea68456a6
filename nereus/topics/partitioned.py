"""Partitioned topics: metadata only; their partitions are ordinary topics.

    /nereus/pulsar/partitioned/{quoted topic}  ->  {"partitions": n}

Partition ``i`` is the topic ``...-partition-i`` (a stream), created with the partitioned
topic (by the admin API and Kafka's CreateTopics alike), or on first use for partitioned
topics declared before that was so.
"""

from __future__ import annotations

import json
from urllib.parse import quote, unquote

from ..ledger.naming import TopicName
from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ..storage import StreamExists

PARTITIONED_ROOT = "/nereus/pulsar/partitioned"
#: Most partitions a topic may have whatever ``maxNumPartitionsPerPartitionedTopic`` says (Pulsar's
#: 0, "no limit", means this): each partition is a stream created eagerly by the request that
#: asks for it, so a count of millions would tie the broker up creating streams until the
#: request timed out, and every listing and stats call walks all of them.
MAX_PARTITIONS = 10_000


def partition_limit(setting: int) -> int:
    """The partition cap in force for ``maxNumPartitionsPerPartitionedTopic`` = ``setting`` (0: ours)."""
    return setting if 0 < setting < MAX_PARTITIONS else MAX_PARTITIONS


def partitioned_key(topic: TopicName) -> str:
    return f"{PARTITIONED_ROOT}/{quote(str(topic), safe='')}"


async def partitions_of(meta: MetadataStore, topic: TopicName) -> int:
    """Partition count of a partitioned topic; 0 for any other topic."""
    if topic.partition_index >= 0:
        return 0
    rec = await meta.get(partitioned_key(topic))
    return json.loads(rec.value)["partitions"] if rec is not None else 0


async def create_partitioned_topic(meta: MetadataStore, topic: TopicName, partitions: int) -> bool:
    """Declare a partitioned topic; False if it already exists."""
    if partitions < 1 or topic.partition_index >= 0:
        raise ValueError("a partitioned topic needs >= 1 partition and a base name")
    try:
        await meta.put(partitioned_key(topic), json.dumps({"partitions": partitions}).encode(),
                       expected_version_id=EXPECT_ABSENT)
    except UnexpectedVersion:
        return False
    return True


async def ensure_stream(storage, name: str) -> None:
    """Create the stream ``name`` unless it exists (``storage``: a StreamStorage)."""
    try:
        await storage.create_stream(name)
    except StreamExists:
        pass


async def is_declared_partition(meta: MetadataStore, topic: TopicName) -> bool:
    """Whether ``topic`` is partition i of a partitioned topic with more than i partitions."""
    return topic.partition_index >= 0 and topic.partition_index < await partitions_of(meta, topic.base)


def partitioned_range(prefix: str) -> tuple[str, str]:
    """Key range of the partitioned-topic records whose names start with ``prefix``."""
    # ``quote`` works character by character: the names starting with ``prefix`` are one key range.
    lo = f"{PARTITIONED_ROOT}/{quote(prefix, safe='')}"
    return lo, lo + "\U0010ffff"


async def list_partitioned_topics(meta: MetadataStore, prefix: str = "") -> list[str]:
    """Names of the partitioned topics starting with ``prefix`` (e.g. one namespace's ``persistent://t/ns/``)."""
    lo, hi = partitioned_range(prefix)
    start = len(PARTITIONED_ROOT) + 1
    return [unquote(k[start:]) async for k in meta.list(lo, hi)]


async def partitioned_topic_records(meta: MetadataStore, prefix: str = "") -> dict[str, tuple[int, int]]:
    """``list_partitioned_topics`` with each one's (partition count, creation time of its record in ms),
    its records read in the same scan."""
    lo, hi = partitioned_range(prefix)
    start = len(PARTITIONED_ROOT) + 1
    return {unquote(rec.key[start:]): (json.loads(rec.value)["partitions"], rec.version.created_timestamp)
            async for rec in meta.range_scan(lo, hi)}


__all__ = ["MAX_PARTITIONS", "PARTITIONED_ROOT", "create_partitioned_topic", "ensure_stream", "is_declared_partition",
           "list_partitioned_topics", "partitioned_range", "partitioned_topic_records", "partition_limit", "partitioned_key", "partitions_of"]
