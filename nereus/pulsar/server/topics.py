"""The Pulsar side of a loaded topic: producers, subscriptions (dispatchers), epoch.

A ``PulsarTopic`` is attached to the protocol-neutral ``nereus.topics.Topic`` (which
owns the stream handle, the append session and the dedup state). When that topic
unloads (its stream moved to another session, an append lost the session, the
broker stops, it went idle) the Pulsar clients are told to reconnect: producers get
CLOSE_PRODUCER and consumers CLOSE_CONSUMER, which make the official clients look
the topic up again and resend what was not acknowledged (deduplicated on arrival).
"""

from __future__ import annotations

import asyncio
import json
import logging
from types import MappingProxyType
from typing import Mapping

from ...ledger.cursor import Cursor, list_cursors
from ...ledger.naming import TopicName
from ...ledger.subscription import Subscription, SubType
from ...meta import update
from ...storage.records import stream_partition
from ...topics import Topic
from ...topics import (PARTITIONED_ROOT, create_partitioned_topic, list_partitioned_topics,  # noqa: F401
                       partitioned_key, partitions_of)
from ...codec.pulsar import pb, wrap
from . import pending_acks
from .dispatcher import Dispatcher

log = logging.getLogger(__name__)

ATTACHMENT = "pulsar"


def epoch_key(stream_id: int) -> str:
    """The topic epoch of exclusive producers, kept with the stream (deleted with it)."""
    return f"{stream_partition(stream_id)}/pulsar-epoch"


NO_TRANSACTIONS: Mapping = MappingProxyType({})  # ``txn_begun`` of a topic no transaction wrote to yet

class PulsarTopic:
    """The Pulsar state of one loaded topic."""

    __slots__ = ("service", "core", "name", "handle", "stream_id", "dedup", "producers", "dispatchers", "epoch",
                 "_epoch_loaded", "exclusive_waiters", "txn_begun", "traffic", "duplicates", "_sub_lock",
                 "_access")  # one per loaded topic: no instance dict
    persistent = True

    def __init__(self, service, core: Topic) -> None:
        self.service = service
        self.core = core
        self.name: TopicName = core.name
        self.handle = core.handle
        self.stream_id = core.stream_id
        self.dedup = core.dedup
        self.producers: dict[int, object] = {}
        self.dispatchers: dict[str, Dispatcher] = {}
        self.epoch = 0  # bumped each time an exclusive producer takes the topic (persisted)
        self._epoch_loaded = False
        self.exclusive_waiters: list[asyncio.Future] = []  # WaitForExclusive producers, in order
        # pids of open transactions checked for this partition (txn_sends.py): a dict as a set, made
        # by the first (most loaded topics never see a transaction; the shared empty one is read-only).
        self.txn_begun: Mapping[int, None] = NO_TRANSACTIONS
        self.traffic = core.traffic
        self.duplicates = 0  # SENDs dropped as duplicates (pulsar_deduplicated_messages, read at scrape)
        self._sub_lock: asyncio.Lock | None = None  # made by the first subscription
        self._access: dict | None = None  # producer access modes' state while any is in play (access.py)
        core.attachments[ATTACHMENT] = self
        service.by_stream[self.stream_id] = self
        # Its append, unload and busy hooks are the service's, registered once on the registry
        # (``PulsarService``): a broker holds many loaded topics.

    @property
    def partition(self) -> int:
        return self.name.partition_index

    @property
    def closed(self) -> bool:
        return self.core.closed

    async def ensure_writer(self) -> None:
        await self.core.ensure_writer()

    def append(self, data: bytes, count: int) -> asyncio.Task:
        return self.core.append(data, count)

    async def load_epoch(self) -> None:
        """Read the stored epoch once, so a producer fenced before a reload stays fenced."""
        if self._epoch_loaded:
            return
        rec = await self.service.meta.get(epoch_key(self.stream_id), partition_key=stream_partition(self.stream_id))
        if rec is not None:
            self.epoch = max(self.epoch, json.loads(rec.value)["epoch"])
        self._epoch_loaded = True

    async def store_epoch(self, epoch: int) -> None:
        """Persist the epoch of a newly granted exclusive producer (never lowering it)."""
        def change(old: bytes | None) -> bytes:
            stored = json.loads(old)["epoch"] if old else 0
            return json.dumps({"epoch": max(stored, epoch)}).encode()

        rec = await update(self.service.meta, epoch_key(self.stream_id), change,
                           partition_key=stream_partition(self.stream_id))
        self.epoch = json.loads(rec.value)["epoch"]

    def appended(self) -> None:
        for dispatcher in self.dispatchers.values():
            if dispatcher.sub.consumers:
                dispatcher.wake()

    def txn_index_changed(self) -> None:
        """The stream's transaction index changed: the LSO may have moved, a transaction ended."""
        # A transaction that ended must be checked again should it send once more (its
        # marker may be in place: a later record of it would read as committed).
        self.txn_begun.clear()
        self.appended()

    def connected(self) -> bool:
        """True while a producer or consumer is attached."""
        return bool(self.producers) or any(d.sub.consumers for d in self.dispatchers.values())

    async def subscription(self, name: str, sub_type: SubType, *, durable: bool, initial: int,
                           properties: dict | None = None) -> Dispatcher:
        """The dispatcher of subscription ``name``, creating (and persisting) it if needed."""
        if self._sub_lock is None:
            self._sub_lock = asyncio.Lock()
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
            dispatcher = Dispatcher(self, sub)
            if durable:  # acks of transactions still open hold their records from dispatch
                dispatcher.txn_acks = await pending_acks.load(self.service.meta, self.stream_id, name)
            self.dispatchers[name] = dispatcher
            return dispatcher

    async def subscription_names(self) -> list[str]:
        durable = await list_cursors(self.service.meta, self.stream_id)
        return sorted(set(durable) | set(self.dispatchers))

    async def drop_subscription(self, name: str) -> None:
        dispatcher = self.dispatchers.pop(name, None)
        self.traffic.forget(name)
        durable = dispatcher is None or dispatcher.sub.cursor.durable
        if dispatcher is not None:
            await dispatcher.close()
            await dispatcher.sub.cursor.delete()
        # Acks of transactions still open go with it: a subscription made again under the
        # name must not find its records held (their transactions' completion finds none).
        if durable:
            await pending_acks.forget(self.service.meta, self.stream_id, name)

    def close_producer(self, producer) -> None:
        """Tell one producer to reconnect (CLOSE_PRODUCER) and forget it here."""
        producer.conn.producers.pop(producer.producer_id, None)
        producer.conn.closed_producers.add(producer.producer_id)
        producer.detach()
        producer.conn.send(wrap(pb.CommandCloseProducer(producer_id=producer.producer_id, request_id=0)))

    def close_producers(self) -> None:
        """Tell every producer to reconnect and forget them here."""
        for producer in list(self.producers.values()):
            self.close_producer(producer)
        self.producers.clear()

    def close_consumers(self, dispatcher: Dispatcher) -> None:
        """Tell a subscription's consumers to reconnect; their unacked entries are redelivered."""
        for slot in list(dispatcher.sub.consumers.values()):
            consumer = slot.handle
            consumer.conn.consumers.pop(consumer.consumer_id, None)
            dispatcher.sub.remove(slot.token)
            consumer.conn.send(wrap(pb.CommandCloseConsumer(consumer_id=consumer.consumer_id, request_id=0)))

    def disconnect_clients(self) -> None:
        for future in self.exclusive_waiters:  # they look the topic up again
            future.cancel()
        self.exclusive_waiters.clear()
        self.close_producers()
        for dispatcher in list(self.dispatchers.values()):
            self.close_consumers(dispatcher)

    async def unloaded(self, reason: str) -> None:
        if self.service.topics.get(str(self.name)) is self:
            del self.service.topics[str(self.name)]
        if self.service.by_stream.get(self.stream_id) is self:
            del self.service.by_stream[self.stream_id]
        self.disconnect_clients()
        await self.close()

    async def close(self) -> None:
        for dispatcher in list(self.dispatchers.values()):
            await dispatcher.close()


async def refresh_policies(service, tenant: str, namespace: str) -> None:
    """Re-read the namespace policies of ``tenant/namespace``'s loaded (and loading) topics."""
    registry = service.registry
    loading = list(registry._loading.values())
    if loading:  # a topic that read the policy before the change is registered once loaded
        await asyncio.gather(*(asyncio.shield(f) for f in loading), return_exceptions=True)
    for topic in list(registry.topics.values()):
        if topic.name.tenant == tenant and topic.name.namespace == namespace:
            await topic.read_policies()


__all__ = ["PARTITIONED_ROOT", "PulsarTopic", "create_partitioned_topic", "list_partitioned_topics",
           "partitioned_key", "partitions_of", "refresh_policies"]
