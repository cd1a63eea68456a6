"""Consumers: SUBSCRIBE, FLOW, ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, CLOSE_CONSUMER, UNSUBSCRIBE.

MessageId <-> offsets: ledgerId is the stream id, entryId the offset of the
entry's first record, batch index the record's index in the entry. Acks land in
the subscription's cursor at once; they are persisted before the ACK_RESPONSE
when the client asked for a receipt, otherwise right after (coalesced).
"""

from __future__ import annotations

import logging

from ...ledger.subscription import ConsumerBusy, ConsumerSlot, SubType
from ...topics import NotOwner
from ...topics.rates import RateMeter
from ...topics.dedup import REPLICATOR_PREFIX
from ...codec.pulsar import pb, wrap
from . import positions, schemas, txn_acks
from .existence import TopicMissing, usable_topic
from .lookup import admitted_topic
from .errors import pulsar_error

log = logging.getLogger(__name__)

#: Pulsar's cursor property of a replicated subscription (``nereus.pulsar.replication.subscriptions``).
REPLICATED_SUBSCRIPTION = "pulsar.replicated.subscription"

_Ack = pb.CommandAck


class Consumer:
    """A client consumer attached to a subscription through one connection."""

    def __init__(self, conn, consumer_id: int, topic, dispatcher, name: str, priority: int, durable: bool) -> None:
        self.conn = conn
        self.consumer_id = consumer_id
        self.topic = topic
        self.dispatcher = dispatcher
        self.durable = durable
        self.slot = ConsumerSlot(conn.service.next_token(), name, priority, 0, self)
        self.meter = RateMeter()  # msgRateOut, msgThroughputOut of its stats

    @property
    def sub(self):
        return self.dispatcher.sub

    def send_message(self, base: int, body: memoryview, redelivery: int, ack_set: list[int] | None) -> None:
        msg = pb.CommandMessage(consumer_id=self.consumer_id, redelivery_count=redelivery,
                                message_id=pb.MessageIdData(ledgerId=self.topic.stream_id, entryId=base,
                                                            partition=self.topic.partition))
        if ack_set:
            msg.ack_set.extend(ack_set)
        self.conn.send_entry(wrap(msg), body)

    async def detach(self) -> None:
        """Leave the subscription (connection lost or consumer closed)."""
        notify(self.sub.remove(self.slot.token))
        self.dispatcher.wake()
        if not self.durable and not self.sub.consumers:
            await self.topic.drop_subscription(self.sub.name)
        else:
            self.dispatcher.schedule_persist()


def notify(notices) -> None:
    """Send ACTIVE_CONSUMER_CHANGE to Failover consumers."""
    for slot, active in notices:
        consumer = slot.handle
        consumer.conn.send(wrap(pb.CommandActiveConsumerChange(consumer_id=consumer.consumer_id, is_active=active)))


async def handle_subscribe(conn, cmd: pb.CommandSubscribe) -> None:
    name = await admitted_topic(conn, cmd, "consume", cmd.subscription)
    if name is None:
        return
    if cmd.consumer_id in conn.consumers:  # a retried SUBSCRIBE
        conn.send_success(cmd.request_id)
        return
    if not cmd.subscription:
        conn.send_error(cmd.request_id, pb.UnknownError, "empty subscription name")
        return
    if cmd.subscription.startswith(REPLICATOR_PREFIX):  # the replicators' cursors (as Pulsar refuses it)
        conn.send_error(cmd.request_id, pb.NotAllowedError, "Subscription with reserved subscription name attempted")
        return
    try:
        topic = await conn.service.registry.placement.while_serving(str(name), usable_topic(conn.service, name))
    except (TopicMissing, NotOwner) as exc:  # not here (another broker's: the client looks it up again)
        conn.send_error(cmd.request_id, pulsar_error(exc), str(exc))
        return
    if not await _consumer_schema(conn, cmd, topic):
        return
    sub_type = SubType(cmd.subType)
    if cmd.read_compacted and (sub_type not in (SubType.EXCLUSIVE, SubType.FAILOVER) or not topic.persistent):
        conn.send_error(cmd.request_id, pb.NotAllowedError,
                        "read_compacted is allowed on persistent topics with Exclusive and Failover subscriptions only")
        return
    # A non-persistent topic's subscriptions live as long as their consumers, as in Pulsar.
    durable = (cmd.durable if cmd.HasField("durable") else True) and topic.persistent
    await topic.handle.refresh()
    if durable or not cmd.HasField("start_message_id"):
        latest = cmd.initialPosition == pb.CommandSubscribe.Latest
        initial = topic.handle.next_offset() if latest else topic.handle.start_offset()
    else:
        initial = positions.start_of(topic, cmd.start_message_id)
    if cmd.read_compacted and initial <= topic.handle.start_offset():
        initial = 0  # the key view holds what retention may have trimmed
    dispatcher = await topic.subscription(cmd.subscription, sub_type, durable=durable, initial=initial,
                                          properties={kv.key: kv.value for kv in cmd.subscription_properties})
    dispatcher.read_compacted = cmd.read_compacted
    cursor = dispatcher.sub.cursor
    if cmd.replicate_subscription_state and cursor.durable and not cursor.properties.get(REPLICATED_SUBSCRIPTION):
        cursor.set_property(REPLICATED_SUBSCRIPTION, True)  # its position reaches the other clusters
        await cursor.persist()
    consumer = Consumer(conn, cmd.consumer_id, topic, dispatcher, cmd.consumer_name or f"consumer-{cmd.consumer_id}",
                        cmd.priority_level, durable)
    try:
        notices = dispatcher.sub.add(consumer.slot, sub_type)
    except ConsumerBusy as exc:
        conn.send_error(cmd.request_id, pb.ConsumerBusy, str(exc))
        return
    if conn.closed:
        await consumer.detach()
        return
    conn.consumers[cmd.consumer_id] = consumer
    conn.send_success(cmd.request_id)
    notify(notices)
    dispatcher.wake()
    log.debug("consumer %s subscribed to %s/%s (%s)", consumer.slot.name, name, cmd.subscription, sub_type.name)


async def _consumer_schema(conn, cmd: pb.CommandSubscribe, topic) -> bool:
    """Check (or, on an idle topic without one, register) the consumer's schema; False after an error."""
    if not cmd.HasField("schema") or cmd.schema.type in (0, pb.Schema.Type.Value("AutoConsume")):
        return True
    type_, data, props = schemas.from_proto(cmd.schema)
    meta, default = conn.service.meta, conn.service.registry.schema_compatibility_strategy
    try:
        if await schemas.get(meta, topic.name) is None and _idle(topic):
            await schemas.put_if_absent(meta, topic.name, type_, data, props, from_client=True,
                                        default_strategy=default)
        else:
            await schemas.check_for_consumer(meta, topic.name, type_, data, props, default)
    except (schemas.IncompatibleSchema, schemas.InvalidSchema) as exc:
        conn.send_error(cmd.request_id, pb.IncompatibleSchema, str(exc))
        return False
    return True


def _idle(topic) -> bool:
    """No producer, no consumer and no data: a consumer's schema may become the topic's (as in Pulsar)."""
    return (not topic.producers and topic.handle.next_offset() == 0
            and not any(d.sub.consumers for d in topic.dispatchers.values()))


def handle_flow(conn, frame) -> None:
    cmd: pb.CommandFlow = frame.body
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None:
        log.debug("FLOW for unknown consumer %d from %s", cmd.consumer_id, conn.peer)
        return
    consumer.slot.permits += cmd.messagePermits
    consumer.dispatcher.wake()


def handle_ack(conn, frame) -> None:
    cmd: pb.CommandAck = frame.body
    consumer = conn.consumers.get(cmd.consumer_id)
    wants_receipt = cmd.HasField("request_id")
    if consumer is None:
        if wants_receipt:
            conn.send(wrap(pb.CommandAckResponse(consumer_id=cmd.consumer_id, request_id=cmd.request_id,
                                                 error=pb.ConsumerNotFound, message="consumer not found")))
        return
    if txn_acks.is_transactional(cmd):  # held until the transaction ends
        conn.spawn(txn_acks.handle_txn_ack(conn, consumer, cmd))
        return
    if not consumer.topic.persistent:  # nothing kept to acknowledge: accepted as Pulsar does
        if wants_receipt:
            conn.send(wrap(pb.CommandAckResponse(consumer_id=cmd.consumer_id, request_id=cmd.request_id)))
        return
    if cmd.HasField("validation_error"):
        log.warning("%s: consumer %s discarded a corrupt entry (%s)", consumer.topic.name, consumer.slot.name,
                    _Ack.ValidationError.Name(cmd.validation_error))
    # Entry sizes come from the stream, never from the client's batch_size: they decide
    # which offsets an ack covers (and how long the lists built for it are).
    unknown = [m for m in cmd.message_id if consumer.sub.entry_size(m.entryId) is None]
    if unknown or wants_receipt:
        conn.spawn(_ack_async(conn, consumer, cmd))
        return
    _apply_acks(consumer, cmd, {})
    consumer.dispatcher.wake()
    consumer.dispatcher.schedule_persist()


async def _ack_async(conn, consumer: Consumer, cmd: pb.CommandAck) -> None:
    sizes: dict[int, int] = {}
    for m in cmd.message_id:
        if consumer.sub.entry_size(m.entryId) is None and m.entryId < 1 << 63:
            found = await positions.entry_at(consumer.topic, m.entryId)
            if found is not None:
                sizes[m.entryId] = found
    error = None
    try:
        _apply_acks(consumer, cmd, sizes)
        consumer.dispatcher.wake()
        await consumer.sub.cursor.persist()
    except Exception as exc:  # the ack is still in memory; the client is told it is not durable
        log.exception("%s: persisting an ack failed", consumer.topic.name)
        error = f"{type(exc).__name__}: {exc}"
    if cmd.HasField("request_id"):
        response = pb.CommandAckResponse(consumer_id=cmd.consumer_id, request_id=cmd.request_id)
        if error is not None:
            response.error = pb.MetadataError
            response.message = error
        conn.send(wrap(response))


def _apply_acks(consumer: Consumer, cmd: pb.CommandAck, sizes: dict[int, int]) -> None:
    sub = consumer.sub
    for m in cmd.message_id:
        base = m.entryId
        if base >= 1 << 63:
            continue  # earliest/latest sentinels are not acknowledgeable
        size = sub.entry_size(base) or sizes.get(base)
        if size is None:
            continue  # no entry starts there (beyond the end, or trimmed): nothing to acknowledge
        if m.ack_set:  # batch-index ack: cleared bits are acknowledged records
            count = min(size, 64 * len(m.ack_set))
            acked = [base + i for i in range(count) if not (m.ack_set[i // 64] >> (i % 64)) & 1]
            if cmd.ack_type == _Ack.Cumulative:
                sub.ack_cumulative(base - 1)
            sub.ack_offsets(base, acked)
        elif cmd.ack_type == _Ack.Cumulative:
            # (L, E) acks through the end of entry E; (L, E-1) from a partly acked batch
            # names the last record of the previous entry, which is not an entry base.
            sub.ack_cumulative(base + (size or 1) - 1)
        else:
            sub.ack_entry(base, size or 1)


def handle_redeliver(conn, frame) -> None:
    cmd: pb.CommandRedeliverUnacknowledgedMessages = frame.body
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None or not consumer.topic.persistent:  # non-persistent: nothing to redeliver
        return
    bases = [m.entryId for m in cmd.message_ids] or None
    if consumer.sub.type in (SubType.EXCLUSIVE, SubType.FAILOVER):
        bases = None  # Pulsar rewinds the whole consumer on these types
    consumer.sub.redeliver(consumer.slot.token, bases)
    consumer.dispatcher.wake()


async def handle_close_consumer(conn, cmd: pb.CommandCloseConsumer) -> None:
    consumer = conn.consumers.pop(cmd.consumer_id, None)
    if consumer is not None:
        await consumer.detach()
        # The client flushed its acks before closing: make them durable first.
        await consumer.sub.cursor.persist()
    conn.send_success(cmd.request_id)


async def handle_unsubscribe(conn, cmd: pb.CommandUnsubscribe) -> None:
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None:
        conn.send_error(cmd.request_id, pb.ConsumerNotFound, "consumer not found")
        return
    others = [s for s in consumer.sub.consumers.values() if s is not consumer.slot]
    if others:
        conn.send_error(cmd.request_id, pb.UnknownError,
                        f"subscription {consumer.sub.name} has {len(others)} other connected consumer(s)")
        return
    conn.consumers.pop(cmd.consumer_id, None)
    consumer.sub.remove(consumer.slot.token)
    await consumer.topic.drop_subscription(consumer.sub.name)
    conn.send_success(cmd.request_id)


async def handle_seek(conn, cmd: pb.CommandSeek) -> None:
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None:
        conn.send_error(cmd.request_id, pb.ConsumerNotFound, "consumer not found")
        return
    topic, dispatcher = consumer.topic, consumer.dispatcher
    if not topic.persistent:
        conn.send_error(cmd.request_id, pb.NotAllowedError, "seek is not supported on non-persistent topics")
        return
    await topic.handle.refresh()
    if cmd.HasField("message_publish_time"):
        position = await positions.by_publish_time(topic, cmd.message_publish_time)
    elif cmd.HasField("message_id"):
        position = positions.seek_position(topic, cmd.message_id)
    else:
        conn.send_error(cmd.request_id, pb.UnknownError, "SEEK needs a message id or a publish time")
        return
    # As Pulsar does: every consumer of the subscription is disconnected and
    # resubscribes, so no message from before the seek is still in flight.
    for slot in list(dispatcher.sub.consumers.values()):
        other = slot.handle
        other.conn.consumers.pop(other.consumer_id, None)
        dispatcher.sub.remove(slot.token)
        other.conn.send(wrap(pb.CommandCloseConsumer(consumer_id=other.consumer_id, request_id=0)))
    dispatcher.reset(position)
    await dispatcher.sub.cursor.persist()
    # A reader's (non-durable) subscription is kept: its consumer resubscribes to
    # the position just set rather than to the start id it first asked for.
    conn.send_success(cmd.request_id)


async def handle_get_last_message_id(conn, cmd: pb.CommandGetLastMessageId) -> None:
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None:
        conn.send_error(cmd.request_id, pb.ConsumerNotFound, "consumer not found")
        return
    if not consumer.topic.persistent:
        conn.send_error(cmd.request_id, pb.NotAllowedError,
                        "GetLastMessageId is not supported on non-persistent topics")
        return
    last = await positions.last_message_id(consumer.topic, read_compacted=consumer.dispatcher.read_compacted)
    response = pb.CommandGetLastMessageIdResponse(request_id=cmd.request_id, last_message_id=last)
    mark = consumer.sub.cursor.acks.acked_below - 1
    response.consumer_mark_delete_position.CopyFrom(
        pb.MessageIdData(ledgerId=consumer.topic.stream_id, entryId=mark if mark >= 0 else (1 << 64) - 1))
    conn.send(wrap(response))


async def handle_consumer_stats(conn, cmd: pb.CommandConsumerStats) -> None:
    consumer = conn.consumers.get(cmd.consumer_id)
    if consumer is None:
        conn.send(wrap(pb.CommandConsumerStatsResponse(request_id=cmd.request_id, error_code=pb.ConsumerNotFound,
                                                       error_message="consumer not found")))
        return
    sub = consumer.sub
    unacked = sum(p.count for p in sub.pending.values() if p.token == consumer.slot.token)
    conn.send(wrap(pb.CommandConsumerStatsResponse(
        request_id=cmd.request_id, consumerName=consumer.slot.name, availablePermits=max(0, consumer.slot.permits),
        unackedMessages=unacked, type=sub.type.name, address=conn.peer,
        msgBacklog=sub.backlog(consumer.topic.handle.next_offset()))))


__all__ = ["Consumer", "handle_ack", "handle_close_consumer", "handle_consumer_stats", "handle_flow",
           "handle_get_last_message_id", "handle_redeliver", "handle_seek", "handle_subscribe",
           "handle_unsubscribe"]
