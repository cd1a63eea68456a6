"""Kafka topics projected onto Pulsar topics and streams.

Kafka topic ``t`` is ``persistent://public/default/t``. A partitioned topic
(the record Pulsar uses, ``/nereus/pulsar/partitioned/...``) with N partitions
has Kafka partitions 0..N-1 = its ``-partition-i`` streams; a non-partitioned
topic (a plain stream) is partition 0. Topics Kafka creates are partitioned.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import uuid
from collections import OrderedDict
from urllib.parse import unquote

from ....ledger.naming import PARTITION_SUFFIX, TopicName
from ....meta import cas
from ....storage import StreamNotFound
from ....storage.records import name_from_key, names_range
from ....topics.partitioned import ensure_stream, partitioned_range, partitioned_topic_records
from ....topics import create_partitioned_topic, key_log, partitioned_key, partitions_of
from ....topics.topic_configs import (TOPIC_CONFIGS_ROOT, assign_replicas, delete_topic_configs, replace_topic_configs,
                                     replica_layouts)
from .kept import KeptAnswers
from .partition import ATTACHMENT, Partition

log = logging.getLogger(__name__)

_LEGAL = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_PARTITION_STREAM = re.compile(r"-partition-\d+$")  # a partition's own stream is not a Kafka topic
NAMESPACE_PREFIX = "persistent://public/default/"
_CREATE_CONCURRENCY = 64  # partition streams created at once by CreateTopics / CreatePartitions
MAX_REMEMBERED_IDS = 100_000  # topic id -> name pairs a broker keeps
_TOPIC_IDS = uuid.UUID("6e657265-7573-4b61-666b-61546f706963")  # the uuid5 namespace of topic ids


class TopicError(Exception):
    """A topic operation failed with a Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _topic_of_stream(key: str) -> str | None:
    """The Kafka topic of a stream-name key of the namespace (a partition's stream: its topic)."""
    name = name_from_key(key)
    return _PARTITION_STREAM.sub("", name[len(NAMESPACE_PREFIX):]) if name.startswith(NAMESPACE_PREFIX) else None


def _topic_of_partitioned(key: str) -> str | None:
    name = unquote(key.rsplit("/", 1)[1])
    return name[len(NAMESPACE_PREFIX):] if name.startswith(NAMESPACE_PREFIX) else None


def _topic_of_configs(key: str) -> str:
    return unquote(key[len(TOPIC_CONFIGS_ROOT):])


def valid_name(name: str | None) -> bool:
    return bool(name) and name not in (".", "..") and bool(_LEGAL.match(name))


def pulsar_name(topic: str) -> TopicName:
    return TopicName("persistent", "public", "default", topic)


def _changes_topics(method):
    """A change made here: what was kept is read again (whether or not the change went through whole)."""
    @functools.wraps(method)
    async def changing(self, *args, **kwargs):
        try:
            return await method(self, *args, **kwargs)
        finally:
            self.kept.changed(args[0] if args else kwargs.get("topic"))
    return changing


class Catalog:
    """Partition counts, partition objects, topic creation and deletion."""

    def __init__(self, meta, storage, registry, configs, *, producer_options: dict | None = None) -> None:
        self.meta = meta
        self.storage = storage
        self.registry = registry
        self.configs = configs  # TopicConfigs: told of topics created and deleted
        self.producer_options = producer_options or {}  # of each partition's ProducerStates
        self._names_by_id: OrderedDict[uuid.UUID, str] = OrderedDict()
        self._writing: dict[tuple[str, int], Partition] = {}  # see partition_to_write
        self.kept = KeptAnswers()  # the listing and layouts of every topic (see ``follow``)

    def follow(self, membership) -> None:
        """Keep the listing of every topic (and their replica layouts) between requests for as long as
        ``membership`` hears each change to them, from any broker (``KeptAnswers``)."""
        self.kept.follow(membership, {names_range(NAMESPACE_PREFIX)[0]: _topic_of_stream,
                                      partitioned_range(NAMESPACE_PREFIX)[0]: _topic_of_partitioned,
                                      TOPIC_CONFIGS_ROOT: _topic_of_configs})

    async def partition_count(self, topic: str) -> int | None:
        """Number of partitions, or None if the topic does not exist."""
        found = await self._partitioning(topic)
        return found[0] if found is not None else None

    async def _partitioning(self, topic: str) -> tuple[int, bool] | None:
        """(partition count, partitioned?) of a topic, None if it does not exist: one read when it is
        partitioned (Kafka's topics are)."""
        if not valid_name(topic):
            return None
        name = pulsar_name(topic)
        if name.partition_index >= 0:
            return None  # a partition's own stream is not a Kafka topic
        count = await partitions_of(self.meta, name)
        if count:
            return count, True
        try:
            await self.storage.stream_id(str(name))
        except StreamNotFound:
            return None
        return 1, False

    async def is_partitioned(self, topic: str) -> bool:
        return bool(await partitions_of(self.meta, pulsar_name(topic)))

    async def stream_name(self, topic: str, index: int) -> TopicName | None:
        """The stream of partition ``index`` of ``topic`` (None: no such partition)."""
        found = await self._partitioning(topic)
        if found is None or not 0 <= index < found[0]:
            return None
        name = pulsar_name(topic)
        return name.partition(index) if found[1] else name

    async def streams(self, topic: str, count: int) -> list[TopicName]:
        """The streams of a topic's ``count`` partitions, in partition order."""
        name = pulsar_name(topic)
        return [name.partition(i) for i in range(count)] if await self.is_partitioned(topic) else [name]

    @staticmethod
    def kafka_partition(stream: str) -> tuple[str, int] | None:
        """(Kafka topic, partition index) of a stream name; None for a stream outside the Kafka namespace."""
        if not stream.startswith(NAMESPACE_PREFIX):
            return None
        name = TopicName.parse(stream)
        index = name.partition_index
        return (name.base.local, index) if index >= 0 else (name.local, 0)

    async def leader_epoch(self, stream: TopicName) -> int:
        """The partition's leader epoch: the fencing token of its stream's latest append session.

        The token grows at each acquisition, so the epoch grows at each change of
        owner. The owner knows its own; others read it from the stream's tail (and a
        partition loaded here for reads serves at least that epoch from now on).
        """
        return (await self.leader_epochs([stream]))[0]

    async def leader_epochs(self, streams: list[TopicName | str]) -> list[int]:
        """``leader_epoch`` of each stream, those not written here read together."""
        epochs = [0] * len(streams)  # a stream not created yet is on its first epoch
        reading: list[tuple[int, Partition | None]] = []
        for i, stream in enumerate(streams):
            loaded = self.registry.loaded(stream)
            part = loaded.attachments.get(ATTACHMENT) if loaded is not None else None
            if part is not None and not part.closed and part.handle.writable:
                epochs[i] = part.leader_epoch
            else:
                reading.append((i, part))
        ids = await self.storage.stream_ids([str(streams[i]) for i, _ in reading])
        present = [(i, part, stream_id) for (i, part), stream_id in zip(reading, ids) if stream_id is not None]
        tails = await self.storage.tails([stream_id for _, _, stream_id in present])
        for (i, part, _), tail in zip(present, tails):
            epochs[i] = tail.token
            if part is not None:
                part.leader_epoch = max(part.leader_epoch, tail.token)
        return epochs

    async def partition(self, topic: str, index: int) -> Partition | None:
        """The loaded partition, or None if it does not exist."""
        name = await self.stream_name(topic, index)
        if name is None:
            return None
        while True:
            core = await self.registry.get(name)
            part = core.attachments.get(ATTACHMENT)
            if part is None:
                part = Partition(core, topic, index, storage=self.storage, meta=self.meta,
                                 producer_options=self.producer_options)
                core.attachments[ATTACHMENT] = part
                part.loading = asyncio.ensure_future(part.load())
            try:
                await asyncio.shield(part.loading)
            except Exception:
                if core.attachments.get(ATTACHMENT) is part:
                    del core.attachments[ATTACHMENT]
                raise
            if not part.closed:
                return part

    def writing(self, topic: str, index: int) -> bool:
        """Does this broker write the partition now (``partition_to_write`` answers from memory)?"""
        part = self._writing.get((topic, index))
        return part is not None and not part.closed and part.handle.writable

    async def partition_to_write(self, topic: str, index: int) -> Partition | None:
        """``partition`` for a produce: from memory, with no metadata read, while this broker holds the
        partition's append session. That needs no check of the topic's existence: deleting a topic
        fences its writers first, so an append to a deleted partition fails and the topic unloads."""
        key = (topic, index)
        part = self._writing.get(key)
        if part is not None and not part.closed and part.handle.writable:
            return part
        part = await self.partition(topic, index)
        if part is not None and self._writing.get(key) is not part:
            self._writing[key] = part

            def forget(_reason: str, part: Partition = part) -> None:
                if self._writing.get(key) is part:
                    del self._writing[key]
            part.topic.on_unload(forget)
        return part

    async def topic_id(self, topic: str) -> uuid.UUID | None:
        """The topic's id (Kafka's topic UUID): stable for its life, new when re-created under the same name.

        Derived from what identifies this incarnation of the topic in metadata (the
        creation time of its partitioned record, else its stream's id), so every
        broker computes the same id without storing one.
        """
        return (await self.describe_topics([topic]))[0][1]

    async def describe_topics(self, topics: list[str]) -> list[tuple[list[str], uuid.UUID | None]]:
        """(the stream names of its partitions in order, ``topic_id``) of each topic, their records read
        together; ([], None) for a topic that is not there."""
        names = [pulsar_name(t) if valid_name(t) and pulsar_name(t).partition_index < 0 else None for t in topics]
        present = [(i, name) for i, name in enumerate(names) if name is not None]
        records = await self.meta.get_many([partitioned_key(name) for _, name in present])
        out: list[tuple[list[str], uuid.UUID | None]] = [([], None)] * len(topics)
        plain = []
        for (i, name), rec in zip(present, records):
            if rec is not None:
                out[i] = _partitioned(topics[i], json.loads(rec.value)["partitions"], rec.version.created_timestamp)
            else:
                plain.append((i, name))
        for (i, name), stream_id in zip(plain, await self.storage.stream_ids([str(name) for _, name in plain])):
            if stream_id is not None:
                out[i] = ([str(name)], _topic_id(topics[i], f"s{stream_id}"))
        return out

    async def describe_all(self) -> dict[str, tuple[list[str], uuid.UUID]]:
        """``describe_topics`` of every topic of public/default: the partitioned ones from the scan
        that lists them (no read of each), then the non-partitioned ones (kept: see ``follow``; the
        answer is shared, not to be changed)."""
        self.keep_listing_current()
        return await self.kept.get("topics", self._describe_all, self._describe_changed)

    def keep_listing_current(self) -> None:
        """Keep the listing and replica layouts of every topic read from now on, patched in the
        background after changes (called once Kafka clients ask for metadata): a Metadata request
        for every topic finds them ready, as a Kafka broker answers from its metadata cache."""
        self.kept.keep_current("topics", self._describe_all, self._describe_changed)
        self.kept.keep_current("layouts", self._read_layouts, self._patch_layouts)

    async def _describe_changed(self, kept: dict, changed: list[str]) -> dict:
        out = dict(kept)
        for local, described in zip(changed, await self.describe_topics(changed)):
            if described[1] is None:
                out.pop(local, None)
            else:
                out[local] = described
        return out

    async def all_replica_layouts(self) -> dict:
        """``replica_layouts`` of every topic ``describe_all`` lists (kept like it)."""
        self.keep_listing_current()
        return await self.kept.get("layouts", self._read_layouts, self._patch_layouts)

    async def _read_layouts(self) -> dict:
        return await replica_layouts(self.meta, list(await self.describe_all()))

    async def _patch_layouts(self, kept: dict, changed: list[str]) -> dict:
        stale = set(changed)
        topics = await self.describe_all()
        out = {topic: kept[topic] for topic in topics if topic in kept and topic not in stale}
        out.update(await replica_layouts(self.meta, [topic for topic in topics if topic not in out]))
        return out

    async def close(self) -> None:
        await self.kept.close()

    async def _describe_all(self) -> dict[str, tuple[list[str], uuid.UUID]]:
        out: dict[str, tuple[list[str], uuid.UUID]] = {}
        for full, (count, created) in (await partitioned_topic_records(self.meta, NAMESPACE_PREFIX)).items():
            local = full[len(NAMESPACE_PREFIX):]
            if valid_name(local):
                out[local] = _partitioned(local, count, created)
        plain = [full[len(NAMESPACE_PREFIX):] for full in
                 await self.storage.list_streams(NAMESPACE_PREFIX, exclude=_PARTITION_STREAM)]
        plain = [local for local in plain if local not in out and valid_name(local)]
        for local, described in zip(plain, await self.describe_topics(plain)):
            if described[1] is not None:  # deleted since it was listed otherwise
                out[local] = described
        return out

    async def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, or None (looked up among the topics of public/default).

        Names found are remembered (up to ``MAX_REMEMBERED_IDS``, the most recently
        asked kept): a client names its topics by id in every fetch and heartbeat, and a
        scan computes every topic's id. A remembered name is checked again (the topic
        may have been deleted or re-created under it).
        """
        remembered = self._names_by_id
        known = remembered.get(topic_id)
        if known is not None:
            listing = self.kept.current("topics")  # every fetch of a client names its topics by id
            described = listing.get(known) if listing is not None else (await self.describe_topics([known]))[0]
            if described is not None and described[1] == topic_id:
                remembered.move_to_end(topic_id)
                return known
        found = None
        for topic, (_, tid) in (await self.describe_all()).items():
            if tid == topic_id:
                found = topic
            elif tid is not None and len(remembered) < MAX_REMEMBERED_IDS:
                remembered[tid] = topic
        if found is not None:
            remembered[topic_id] = found
            remembered.move_to_end(topic_id)
            while len(remembered) > MAX_REMEMBERED_IDS:
                remembered.popitem(last=False)
        return found

    async def list_topics(self) -> dict[str, int]:
        """Every topic of public/default with its partition count."""
        return {name: len(streams) for name, (streams, _) in (await self.describe_all()).items()}

    @_changes_topics
    async def create(self, topic: str, partitions: int, configs: dict[str, str] | None = None,
                     replication_factor: int | None = None, replicas: dict[int, list[int]] | None = None) -> None:
        """Create a partitioned topic with ``configs`` (validated) set on it, and the replication factor
        and replica lists a client asked for (reported in Metadata)."""
        if not valid_name(topic):
            raise TopicError(17, f"invalid topic name {topic!r}")
        if partitions < 1:
            raise TopicError(37, "the number of partitions must be at least 1")
        if await self.partition_count(topic) is not None:
            raise TopicError(36, f"topic {topic!r} already exists")
        if not await create_partitioned_topic(self.meta, pulsar_name(topic), partitions):
            raise TopicError(36, f"topic {topic!r} already exists")
        await self._create_streams(topic, 0, partitions)
        # Whatever a topic of this name had set before it was deleted elsewhere goes with it.
        await replace_topic_configs(self.meta, topic, configs or {}, replication_factor, replicas)
        self.configs.changed(topic)
        log.info("kafka: topic %s created with %d partition(s)", topic, partitions)

    @_changes_topics
    async def add_partitions(self, topic: str, total: int, replicas: dict[int, list[int]] | None = None) -> None:
        """Grow ``topic`` to ``total`` partitions, the new ones with the replica lists assigned (if any)."""
        count = await self.partition_count(topic)
        if count is None:
            raise TopicError(3, f"topic {topic!r} does not exist")
        if not await self.is_partitioned(topic):
            raise TopicError(37, f"{topic!r} is a non-partitioned Pulsar topic")
        if total <= count:
            raise TopicError(37, f"topic has {count} partitions; the new count must be larger")

        def grow(old: bytes | None) -> bytes | None:
            current = json.loads(old)["partitions"] if old else 0
            return None if current >= total else json.dumps({"partitions": total}).encode()

        if replicas:  # before the partitions appear: Metadata never lists them without their replicas
            await assign_replicas(self.meta, topic, replicas)
        await cas.update(self.meta, partitioned_key(pulsar_name(topic)), grow)
        await self._create_streams(topic, count, total)
        log.info("kafka: topic %s now has %d partitions", topic, total)

    async def _create_streams(self, topic: str, first: int, end: int) -> None:
        """The streams of partitions ``first`` .. ``end - 1``: a topic exists, with its partitions, the
        moment it is created, as one the admin API creates (stats and lookups find every partition)."""
        name = pulsar_name(topic)
        for start in range(first, end, _CREATE_CONCURRENCY):
            await asyncio.gather(*(ensure_stream(self.storage, str(name.partition(i)))
                                   for i in range(start, min(end, start + _CREATE_CONCURRENCY))))

    @_changes_topics
    async def delete(self, topic: str) -> None:
        count = await self.partition_count(topic)
        if count is None:
            raise TopicError(3, f"topic {topic!r} does not exist")
        name = pulsar_name(topic)
        partitioned = await self.is_partitioned(topic)
        streams = [name.partition(i) for i in range(count)] if partitioned else [name]
        for stream in streams:
            loaded = self.registry.loaded(stream)
            if loaded is not None:
                await self.registry.unload(loaded, "deleted by a Kafka client")
            try:
                await key_log.delete_topic_stream(self.storage, str(stream))
            except StreamNotFound:
                pass
        if partitioned:
            await self.meta.delete(partitioned_key(name))
        await delete_topic_configs(self.meta, topic)
        self.configs.changed(topic)
        log.info("kafka: topic %s deleted", topic)



def _partitioned(topic: str, count: int, created_ms: int) -> tuple[list[str], uuid.UUID]:
    """``describe_topics`` of a partitioned topic from its record's partition count and creation time."""
    base = f"{NAMESPACE_PREFIX}{topic}{PARTITION_SUFFIX}"
    return [f"{base}{p}" for p in range(count)], _topic_id(topic, f"p{created_ms}")


@functools.lru_cache(maxsize=MAX_REMEMBERED_IDS)
def _topic_id(topic: str, incarnation: str) -> uuid.UUID:
    """The id of this incarnation of ``topic`` (a hash: computed once, every Metadata answer has it)."""
    return uuid.uuid5(_TOPIC_IDS, f"{topic}/{incarnation}")

__all__ = ["Catalog", "TopicError", "pulsar_name", "valid_name"]
