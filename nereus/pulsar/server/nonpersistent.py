"""Non-persistent topics (``non-persistent://tenant/ns/topic``): dispatched from memory, never stored.

A SEND is handed at once to the consumers connected at that moment, one copy per
subscription (chosen within it as its type says), and forgotten: no stream, no
object, no cursor record. A subscription whose consumers have no permits left
drops the message (at-most-once, Pulsar's ``msgDropRate``). The message id's
entry id counts messages since the topic loaded on this broker; acknowledgements,
redeliveries and seeks have nothing to act on.

Exclusivity of producers and the one-owner rule work as for persistent topics (the
owner serves the topic's clients); the topic is forgotten once nothing is attached.
"""

from __future__ import annotations

import asyncio
import logging

from ...ledger.cursor import Cursor
from ...ledger.naming import TopicName
from ...ledger.subscription import Subscription, SubType
from ...storage.api import AppendResult
from ...topics.rates import RateMeter
from ...topics.traffic import TopicTraffic
from ...codec.pulsar import pb, wrap
from . import entries

log = logging.getLogger(__name__)


class _NoDedup:
    """Deduplication is off on non-persistent topics (nothing is stored to check against)."""

    enabled = False

    def __init__(self) -> None:
        self.pushed: dict[str, int] = {}
        self.inflight: dict = {}

    def last_sequence(self, _name: str) -> int:
        return -1

    def accept(self, _name: str, _highest: int) -> None:
        pass

    def committed(self, _name: str, _highest: int, _end: int) -> None:
        pass

    def failed(self, _name: str) -> None:
        pass


class _MemoryHandle:
    """What producers and consumers ask of a stream handle: nothing is readable, ever."""

    writable = False
    fencing_token = None

    def __init__(self) -> None:
        self.end = 0

    async def refresh(self) -> None:
        pass

    def next_offset(self) -> int:
        return self.end

    def start_offset(self) -> int:
        return self.end


class MemoryDispatcher:
    """One subscription of a non-persistent topic: pushes each message to a consumer with permits."""

    def __init__(self, topic: "NonPersistentTopic", sub: Subscription) -> None:
        self.topic = topic
        self.sub = sub
        self.generation = 0
        self.redelivered = RateMeter()
        self.dropped = RateMeter()  # msgDropRate of the subscription's stats

    @property
    def name(self) -> str:
        return self.sub.name

    def deliver(self, base: int, count: int, body: memoryview) -> None:
        sub = self.sub
        key = entries.sticky_key(body) if sub.type == SubType.KEY_SHARED else None
        slot = sub.choose(key)
        if slot is None:
            self.dropped.record(count, len(body))
            return
        slot.permits -= count
        slot.handle.send_message(base, body, 0, None)
        self.topic.traffic.delivered(sub.name, count, len(body))
        slot.handle.meter.record(count, len(body))

    def wake(self) -> None:
        pass  # nothing waits to be read: messages are pushed as they arrive

    def schedule_persist(self) -> None:
        pass

    def reset(self, _position: int) -> None:
        self.generation += 1

    async def close(self) -> None:
        pass


class NonPersistentTopic:
    """The Pulsar state of one non-persistent topic on its owner."""

    persistent = False

    def __init__(self, service, name: TopicName) -> None:
        self.service = service
        self.name = name
        self.handle = _MemoryHandle()
        self.stream_id = 0  # the ledger id of its message ids
        self.dedup = _NoDedup()
        self.producers: dict[int, object] = {}
        self.dispatchers: dict[str, MemoryDispatcher] = {}
        self.epoch = 0
        self.exclusive_waiters: list = []
        self.traffic = TopicTraffic(str(name))
        self.duplicates = 0  # SENDs dropped as duplicates: never, nothing is deduplicated here
        self.closed = False

    @property
    def partition(self) -> int:
        return self.name.partition_index

    async def ensure_writer(self) -> None:
        pass

    async def load_epoch(self) -> None:
        pass  # lives as long as the topic's clients: nothing to carry over

    async def store_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def append(self, data: bytes, count: int) -> asyncio.Future:
        """Dispatch now to every subscription; the future holds the message's entry id."""
        base = self.handle.end
        self.handle.end += count
        body = entries.body_of(data)
        for dispatcher in list(self.dispatchers.values()):
            if dispatcher.sub.consumers:
                dispatcher.deliver(base, count, body)
        future = asyncio.get_running_loop().create_future()
        future.set_result(AppendResult(base))
        return future

    def connected(self) -> bool:
        return bool(self.producers) or any(d.sub.consumers for d in self.dispatchers.values())

    async def subscription(self, name: str, sub_type: SubType, *, durable: bool, initial: int,
                           properties: dict | None = None) -> MemoryDispatcher:
        dispatcher = self.dispatchers.get(name)
        if dispatcher is None:
            cursor = Cursor.ephemeral(self.stream_id, name, initial=self.handle.end)
            sub = Subscription(name, sub_type, cursor, partition_index=self.partition)
            dispatcher = self.dispatchers[name] = MemoryDispatcher(self, sub)
        return dispatcher

    async def subscription_names(self) -> list[str]:
        return sorted(self.dispatchers)

    async def drop_subscription(self, name: str) -> None:
        self.dispatchers.pop(name, None)
        self.traffic.forget(name)
        self.forget_if_unused()

    def close_producer(self, producer) -> None:
        producer.conn.producers.pop(producer.producer_id, None)
        producer.conn.closed_producers.add(producer.producer_id)
        producer.detach()
        producer.conn.send(wrap(pb.CommandCloseProducer(producer_id=producer.producer_id, request_id=0)))

    def forget_if_unused(self) -> None:
        """Drop the topic from the broker once no client is attached (nothing of it outlives them)."""
        if self.connected() or self.exclusive_waiters:
            return
        memory = self.service.registry.memory_topics
        if memory.get(str(self.name)) is self:
            del memory[str(self.name)]
            self.closed = True
            self.traffic.close()
            log.debug("non-persistent topic %s forgotten", self.name)

    def disconnect_clients(self) -> None:
        """Tell every client to look the topic up again (it moves to another broker)."""
        self.closed = True
        self.traffic.close()
        for future in self.exclusive_waiters:
            if not future.done():
                future.cancel()
        for producer in list(self.producers.values()):
            self.close_producer(producer)
        for dispatcher in list(self.dispatchers.values()):
            for slot in list(dispatcher.sub.consumers.values()):
                consumer = slot.handle
                consumer.conn.consumers.pop(consumer.consumer_id, None)
                dispatcher.sub.remove(slot.token)
                consumer.conn.send(wrap(pb.CommandCloseConsumer(consumer_id=consumer.consumer_id, request_id=0)))


__all__ = ["MemoryDispatcher", "NonPersistentTopic"]
