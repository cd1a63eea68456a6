"""Topics: one stream per non-partitioned topic or partition, plus its broker state.

A ``Topic`` owns the stream handle, the producers, the dispatchers (one per
subscription) and the dedup state. Partitioned topics exist only as metadata::

    /nereus/pulsar/partitioned/{quoted topic}  ->  {"partitions": n}

Their partitions are ordinary topics (``...-partition-i``), created on first use.

A loaded topic applies its namespace's deduplication policy; ``refresh_policies``
re-reads it for the loaded topics of a namespace after the admin API changed it.
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import quote, unquote

from ...ledger.cursor import Cursor, list_cursors
from ...ledger.naming import TopicName
from ...ledger.subscription import Subscription, SubType
from ...meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ...storage import StreamHandle
from . import dedup as _dedup
from . import metrics
from .dedup import Dedup
from .schemas import policies_key
from .dispatcher import Dispatcher

log = logging.getLogger(__name__)

PARTITIONED_ROOT = "/nereus/pulsar/partitioned"


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


async def list_partitioned_topics(meta: MetadataStore) -> list[str]:
    prefix = PARTITIONED_ROOT + "/"
    return [unquote(k[len(prefix):]) async for k in meta.list(prefix, prefix + "\U0010ffff")]


class Topic:
    """The broker-side state of one stream."""

    def __init__(self, service, name: TopicName, handle: StreamHandle) -> None:
        self.service = service
        self.name = name
        self.handle = handle
        self.stream_id = handle.stream_id
        self.producers: dict[int, object] = {}
        self.dispatchers: dict[str, Dispatcher] = {}
        self.dedup = Dedup(service.meta, handle.stream_id)
        self.epoch = 0  # bumped each time an exclusive producer takes the topic
        label = str(name)  # the labelled counters, looked up once (not per SEND)
        self.in_messages = metrics.IN_MESSAGES.labels(label)
        self.in_bytes = metrics.IN_BYTES.labels(label)
        self.duplicates = metrics.DUPLICATES.labels(label)
        self._loop = asyncio.get_running_loop()
        self._writer_ready = False
        self._sub_lock = asyncio.Lock()

    @property
    def partition(self) -> int:
        return self.name.partition_index

    async def load(self) -> None:
        await self.dedup.restore(self.handle)
        await self.read_policies()

    async def read_policies(self) -> None:
        """Apply the namespace's deduplication policy (the broker default when unset)."""
        rec = await self.service.meta.get(policies_key(self.name.tenant, self.name.namespace))
        value = json.loads(rec.value).get("deduplicationEnabled") if rec is not None else None
        enabled = value if isinstance(value, bool) else _dedup.BROKER_DEDUPLICATION_ENABLED
        if enabled != self.dedup.enabled:
            log.info("%s: deduplication %s", self.name, "enabled" if enabled else "disabled")
        self.dedup.enabled = enabled

    async def ensure_writer(self) -> None:
        """Take the stream's append session before the first SEND (keeps appends in call order)."""
        if not self._writer_ready:
            await self.handle.acquire()
            self._writer_ready = True

    def append(self, data: bytes, count: int) -> asyncio.Task:
        """Start an append now (call order = offset order); the task yields the base offset."""
        return self._loop.create_task(self.handle.append(data, count))

    def appended(self) -> None:
        for dispatcher in self.dispatchers.values():
            if dispatcher.sub.consumers:
                dispatcher.wake()

    async def subscription(self, name: str, sub_type: SubType, *, durable: bool, initial: int,
                           properties: dict | None = None) -> Dispatcher:
        """The dispatcher of subscription ``name``, creating (and persisting) it if needed."""
        async with self._sub_lock:
            dispatcher = self.dispatchers.get(name)
            if dispatcher is not None:
                return dispatcher
            if durable:
                cursor, created = await Cursor.open(self.service.meta, self.stream_id, name, initial=initial,
                                                    properties=properties, objects=self.service.storage.objects)
                if created:
                    log.info("%s: subscription %s created at offset %d", self.name, name, initial)
            else:
                cursor = Cursor.ephemeral(self.stream_id, name, initial=initial)
            sub = Subscription(name, sub_type, cursor, partition_index=self.partition)
            dispatcher = self.dispatchers[name] = Dispatcher(self, sub)
            return dispatcher

    async def subscription_names(self) -> list[str]:
        durable = await list_cursors(self.service.meta, self.stream_id)
        return sorted(set(durable) | set(self.dispatchers))

    async def drop_subscription(self, name: str) -> None:
        dispatcher = self.dispatchers.pop(name, None)
        if dispatcher is not None:
            await dispatcher.close()
            await dispatcher.sub.cursor.delete()

    async def close(self) -> None:
        for dispatcher in list(self.dispatchers.values()):
            await dispatcher.close()
        try:
            await self.dedup.snapshot()
        except Exception:
            log.exception("%s: dedup snapshot at close failed", self.name)
        await self.handle.close()


async def refresh_policies(service, tenant: str, namespace: str) -> None:
    """Re-read the namespace policies of ``tenant/namespace``'s loaded (and loading) topics."""
    loading = list(service._loading.values())
    if loading:  # a topic that read the policy before the change is registered once loaded
        await asyncio.gather(*(asyncio.shield(f) for f in loading), return_exceptions=True)
    for topic in list(service.topics.values()):
        if topic.name.tenant == tenant and topic.name.namespace == namespace:
            await topic.read_policies()


__all__ = ["PARTITIONED_ROOT", "Topic", "create_partitioned_topic", "list_partitioned_topics",
           "partitioned_key", "partitions_of", "refresh_policies"]
