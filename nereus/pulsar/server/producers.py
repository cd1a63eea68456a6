"""Producers: PRODUCER, SEND -> append -> SEND_RECEIPT, CLOSE_PRODUCER.

A SEND is appended as it arrives (call order is offset order) and its receipt is
queued; receipts leave strictly in SEND order even though appends complete
asynchronously. Deduplication is by producer name and sequence id: a SEND whose
sequence id is not above the highest one accepted is not stored again; it gets the
MessageId of the original while that is still in flight, else ``-1:-1`` (what a
Pulsar broker with deduplication answers).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from ...storage import StreamFenced
from ...topics import NotOwner
from ...topics.dedup import NOTHING_IN_FLIGHT, REPLICATOR_PREFIX
from ...topics.rates import RateMeter
from ...codec.pulsar import pb, wrap
from . import access, entries, metrics, schemas, txn_sends
from .errors import ProtocolViolation, pulsar_error
from .existence import TopicMissing, usable_topic
from .lookup import admitted_topic

#: The topic attachment of geo-replication (``nereus.pulsar.replication``), which takes the
#: markers of replicated subscriptions that other clusters' replicators store here.
REPLICATION = "replication"

log = logging.getLogger(__name__)

_NO_ID = (1 << 64) - 1  # -1 as the uint64 of MessageIdData


class _Pending:
    """A SEND awaiting its receipt: ``future`` is the append task (or that of the original
    of a duplicate still in flight), ``result`` the (ledger id, entry id) once known."""

    __slots__ = ("seq", "highest", "future", "result", "error", "code")

    def __init__(self, seq: int, highest: int, future: asyncio.Future | None, result=None) -> None:
        self.seq = seq
        self.highest = highest
        self.future = future
        self.result = result
        self.error: str | None = None
        self.code = pb.PersistenceError


class Producer:
    def __init__(self, conn, producer_id: int, topic, name: str, access_mode: int) -> None:
        self.conn = conn
        self.producer_id = producer_id
        self.topic = topic
        self.name = name
        self.access_mode = access_mode
        self.token = conn.service.next_token()
        self.schema_version = b""
        self.meter = RateMeter()  # msgRateIn, msgThroughputIn, averageMsgSize of its stats
        # Another cluster's replicator: always deduplicated, and its markers are handed on.
        self.replicator = name.startswith(REPLICATOR_PREFIX)
        self._queue: deque[_Pending] = deque()
        # The last transaction check in flight (txn_sends.py): appends after it wait for it.
        self.gate: asyncio.Future | None = None

    @property
    def exclusive(self) -> bool:
        return self.access_mode != pb.Shared

    def detach(self) -> None:
        self.topic.producers.pop(self.token, None)
        if not self.topic.producers:  # a dict keeps the table it grew to: an idle topic keeps an empty one
            self.topic.producers = {}
        self._queue.clear()
        access.next_turn(self.topic)
        if not self.topic.persistent:
            self.topic.forget_if_unused()

    def enqueue(self, item: _Pending) -> None:
        self._queue.append(item)
        if item.future is None:
            if len(self._queue) == 1:
                self.drain()
        else:
            item.future.add_done_callback(self._future_done)

    def _future_done(self, _future: asyncio.Future) -> None:
        self.drain()

    def drain(self) -> None:
        """Send the receipts (or errors) at the head of the queue whose appends are done."""
        queue = self._queue
        out = []
        stream_id = self.topic.stream_id
        while queue:
            head = queue[0]
            future = head.future
            if future is not None and not future.done():
                break
            if head.result is None and future is not None:
                exc = future.exception() if not future.cancelled() else asyncio.CancelledError()
                if isinstance(exc, StreamFenced):
                    # The topic unloads: the producer is told to reconnect (CLOSE_PRODUCER)
                    # and resends everything unacknowledged, as after a Pulsar topic unload.
                    # No receipt or error for what is left: none of it committed.
                    queue.clear()
                    break
                if exc is None:
                    head.result = (stream_id, future.result().base_offset)
                else:
                    head.error = f"{type(exc).__name__}: {exc}"
                    head.code = pulsar_error(exc, default=pb.PersistenceError)
            queue.popleft()
            if head.error is not None:
                metrics.SEND_ERRORS.labels("persistence" if head.code == pb.PersistenceError else "refused").inc()
                out.append(wrap(pb.CommandSendError(producer_id=self.producer_id, sequence_id=head.seq,
                                                    error=head.code, message=head.error)))
                continue
            ledger, entry = head.result
            out.append(wrap(pb.CommandSendReceipt(
                producer_id=self.producer_id, sequence_id=head.seq, highest_sequence_id=head.highest,
                message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry))))
        if out:
            self.conn.send_many(out)


async def handle_producer(conn, cmd: pb.CommandProducer) -> None:
    """Create a producer: the topic must be usable (existence.py), its access mode granted (access.py)."""
    name = await admitted_topic(conn, cmd, "produce")
    if name is None:
        return
    existing = conn.producers.get(cmd.producer_id)
    if existing is not None:  # a retried PRODUCER for a producer already created
        _success(conn, cmd.request_id, existing)
        return
    refusal = conn.service.storage.refusal
    if refusal is not None:  # out of space: refused now, rather than accepted until its first write fails
        conn.send_error(cmd.request_id, pb.PersistenceError, refusal)
        return
    try:
        topic = await conn.service.registry.placement.while_serving(
            str(name), usable_topic(conn.service, name))
    except (TopicMissing, NotOwner) as exc:  # not here (another broker's: the client looks it up again)
        conn.send_error(cmd.request_id, pulsar_error(exc), str(exc))
        return
    mode = cmd.producer_access_mode
    producer_name = cmd.producer_name if cmd.HasField("producer_name") and cmd.producer_name else None
    others = [p for p in topic.producers.values() if not p.conn.closed]
    if producer_name is not None and any(p.name == producer_name for p in others):
        conn.send_error(cmd.request_id, pb.ProducerBusy,
                        f"producer with name {producer_name!r} is already connected to {name}")
        return
    given_epoch = cmd.topic_epoch if cmd.HasField("topic_epoch") else None
    if mode != pb.Shared:
        await topic.load_epoch()
    refusal = access.refusal(topic, mode, given_epoch)
    if refusal is not None:
        conn.send_error(cmd.request_id, *refusal)
        return
    if mode == pb.ExclusiveWithFencing:
        access.fence_all(topic)
    elif mode == pb.WaitForExclusive and access.must_wait(topic):
        producer_name = producer_name or conn.service.producer_name()
        if not await access.wait_turn(conn, cmd.request_id, cmd.producer_id, topic, producer_name):
            return
    producer = None
    try:
        producer = await _create(conn, cmd, topic, name, producer_name, given_epoch)
    finally:
        access.done_waiting(topic, mode=mode, failed=producer is None)
    if producer is None:
        return
    log.debug("producer %s created on %s", producer.name, name)
    _success(conn, cmd.request_id, producer)


async def _create(conn, cmd: pb.CommandProducer, topic, name, producer_name: str | None,
                  given_epoch: int | None) -> Producer | None:
    """Register a granted producer; None after an error was sent (or the client went)."""
    mode = cmd.producer_access_mode
    schema_version = await _producer_schema(conn, cmd, name)
    if schema_version is None:
        return None
    try:
        await topic.ensure_writer()
    except StreamFenced as exc:  # unloaded meanwhile, or owned by a newer session: look up again
        conn.send_error(cmd.request_id, pulsar_error(exc), f"{name} is not available here now: {exc}")
        return None
    if conn.closed or topic.closed:
        if not conn.closed:
            conn.send_error(cmd.request_id, pb.ServiceNotReady, f"{name} was unloaded; look it up again")
        return None
    if mode != pb.Shared:
        await topic.store_epoch(given_epoch if given_epoch is not None else topic.epoch + 1)
        if conn.closed or topic.closed:
            return None
    producer = Producer(conn, cmd.producer_id, topic, producer_name or conn.service.producer_name(), mode)
    producer.schema_version = schema_version
    conn.producers[cmd.producer_id] = producer
    conn.closed_producers.discard(cmd.producer_id)
    topic.producers[producer.token] = producer
    return producer


async def _producer_schema(conn, cmd: pb.CommandProducer, name) -> bytes | None:
    """Register the producer's schema; its version (b"" without one), None after an error was sent."""
    if not cmd.HasField("schema") or cmd.schema.type == 0:
        return b""  # a bytes producer is accepted on any topic (Pulsar's schemaValidationEnforced=false)
    try:
        version = await schemas.put_if_absent(conn.service.meta, name, *schemas.from_proto(cmd.schema),
                                              from_client=True,
                                              default_strategy=conn.service.registry.schema_compatibility_strategy)
    except (schemas.IncompatibleSchema, schemas.InvalidSchema) as exc:
        conn.send_error(cmd.request_id, pb.IncompatibleSchema, str(exc))
        return None
    return schemas.version_bytes(version)


def _success(conn, request_id: int, producer: Producer) -> None:
    response = pb.CommandProducerSuccess(
        request_id=request_id, producer_name=producer.name,
        last_sequence_id=producer.topic.dedup.last_sequence(producer.name),
        topic_epoch=producer.topic.epoch, producer_ready=True)
    if producer.schema_version:
        response.schema_version = producer.schema_version
    conn.send(wrap(response))


def handle_send(conn, frame) -> None:
    cmd: pb.CommandSend = frame.body
    producer = conn.producers.get(cmd.producer_id)
    if producer is None:
        if cmd.producer_id in conn.closed_producers:
            return  # sent before the client saw our CLOSE_PRODUCER: it resends after reconnecting
        raise ProtocolViolation(f"SEND for unknown producer {cmd.producer_id}")
    if frame.entry is None:
        raise ProtocolViolation("SEND without a payload")
    if not frame.checksum_ok:
        # Pulsar's answer: the client checks its own copy, then resends or fails it.
        metrics.SEND_ERRORS.labels("checksum").inc()
        conn.send(wrap(pb.CommandSendError(producer_id=cmd.producer_id, sequence_id=cmd.sequence_id,
                                           error=pb.ChecksumError, message="Checksum failed on the broker")))
        return
    meta = frame.metadata
    bad_count = entries.implausible_count(meta, len(frame.entry))
    if bad_count is not None:
        raise ProtocolViolation(bad_count)
    topic, name = producer.topic, producer.name
    if topic.closed:
        return  # unloading: CLOSE_PRODUCER is on its way; the client resends this
    seq = cmd.sequence_id
    highest = cmd.highest_sequence_id
    if highest < seq:
        highest = seq
    if meta.num_chunks_from_msg > 1 and meta.chunk_id < meta.num_chunks_from_msg - 1:
        # A chunk other than the last: every chunk carries the message's sequence id, so
        # (as Pulsar does) only the last chunk takes part in deduplication. Stored with no
        # sequence id: a restart must not count the message as persisted before its last
        # chunk is.
        _append(conn, producer, frame, meta, seq, highest, None, -1)
        return
    dedup = topic.dedup
    if (dedup.enabled or producer.replicator) and seq <= dedup.pushed.get(name, -1):  # Dedup.is_duplicate, inlined
        topic.duplicates += 1
        original = dedup.inflight.get((name, seq))
        if original is not None:
            producer.enqueue(_Pending(seq, highest, original))
        else:
            producer.enqueue(_Pending(seq, highest, None, (_NO_ID, _NO_ID)))
        return
    dedup.accept(name, highest)
    _append(conn, producer, frame, meta, seq, highest, dedup, highest)


def _append(conn, producer: Producer, frame, meta, seq: int, highest: int, dedup, stored_highest: int) -> None:
    """Append a SEND now (call order is offset order) and queue its receipt.

    ``dedup`` is the topic's state for a SEND that takes part in deduplication (None
    for a leading chunk): the append is registered in flight under its sequence id.
    """
    topic, name = producer.topic, producer.name
    txn = txn_sends.txn_of(frame.body, meta)
    data, count = entries.stored_entry(frame, meta, stored_highest, None if txn is None else txn[1])
    task = txn_sends.append(producer, data, count, txn)
    key = (name, seq)
    if dedup is not None:
        if not dedup.inflight:  # the shared empty one
            dedup.inflight = {}
        dedup.inflight[key] = task
    size = len(data)
    conn.send_started(size)
    core = getattr(topic, "core", None)  # a non-persistent topic has no rate policies
    limit = core.publish_limit if core is not None else None
    if limit is not None:
        # Over the publishRate the producer's connection is not read until the bucket
        # refills (what was received still goes in), as a Pulsar broker pauses auto-read.
        limit.take(count, size)
        delay, _ = limit.delay()
        if delay > 0 and conn.throttle_reads(delay):
            core.publish_rate_limited += 1

    def done(t: asyncio.Task) -> None:
        conn.send_finished(size)
        if dedup is not None and dedup.inflight.get(key) is t:  # a disabled dedup lets ids repeat
            del dedup.inflight[key]
            if not dedup.inflight:  # the table it grew to goes (one per loaded topic)
                dedup.inflight = NOTHING_IN_FLIGHT
        if t.cancelled() or t.exception() is not None:  # (also marks the exception retrieved)
            if dedup is not None:
                dedup.failed(name)
            return
        topic.dedup.committed(name, stored_highest, t.result().base_offset + count)
        topic.traffic.published(count, size)
        producer.meter.record(count, size)
        if producer.replicator and meta.HasField("marker_type"):
            manager = conn.service.replication
            if core is not None and manager is not None:  # a topic's first marker makes its replication state
                manager.attach(core).marker_stored(meta.marker_type, bytes(frame.payload), t.result().base_offset)

    task.add_done_callback(done)
    producer.enqueue(_Pending(seq, highest, task))


async def handle_close_producer(conn, cmd: pb.CommandCloseProducer) -> None:
    producer = conn.producers.pop(cmd.producer_id, None)
    if producer is not None:
        producer.detach()
    else:  # still waiting for exclusive access (or never created): it leaves the queue
        conn.closed_producers.add(cmd.producer_id)
    conn.send_success(cmd.request_id)


__all__ = ["Producer", "handle_close_producer", "handle_producer", "handle_send"]
