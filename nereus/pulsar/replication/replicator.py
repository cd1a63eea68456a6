"""One replicator: a topic's committed entries sent on to one remote cluster, exactly once.

It reads the local stream through a durable cursor named ``pulsar.repl.{remote}``
(a subscription like any: it holds retention and shows in stats) and sends each
entry as it is stored (metadata and payload, batches and compression kept) with a
producer named ``pulsar.repl.{local}`` on the same topic of the remote cluster.
Each SEND carries the entry's offset range as its sequence ids, and the remote
always deduplicates a replicator's producer name (``topics.dedup``): a resend after
a restart, an owner move or a cut link is dropped there, and the producer's
``last_sequence_id`` tells a new replicator where the remote stands.

Not sent: entries that came from another cluster (``replicated_from`` set, so a full
mesh has no loops), entries whose ``replicate_to`` leaves this remote out,
transaction markers and aborted records, and nothing above the last stable offset.
The markers of replicated subscriptions (``subscriptions.py``) are sent as entries are.
An entry's schema is registered on the remote topic first (its version there replaces
ours in the entry's metadata), as a Pulsar producer with that schema would.
Records of committed transactions go out as plain records.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from ...ledger.cursor import Cursor, CursorFenced
from ...ledger.entry import EntryFlags
from ...storage import OffsetOutOfRange
from ...topics.dedup import REPLICATOR_PREFIX
from ...topics.rates import RateMeter
from ...tasks import wait_for
from ..client import RemoteProducer
from ..server import entries, schemas, visibility
from .subscriptions import SENT_MARKERS

log = logging.getLogger(__name__)

_CONTROL = int(EntryFlags.CONTROL)
#: Entries sent and not yet acknowledged by the remote, at most.
MAX_IN_FLIGHT = 1000
#: Bytes read from the stream per step.
READ_BYTES = 1 << 20
#: Seconds between cursor writes while entries are acknowledged.
PERSIST_SECONDS = 1.0
#: Longest wait between retries after a failure.
MAX_BACKOFF = 10.0


def cursor_name(remote: str) -> str:
    return f"{REPLICATOR_PREFIX}{remote}"


def producer_name(local: str) -> str:
    return f"{REPLICATOR_PREFIX}{local}"


class ReplicationError(Exception):
    """The remote cluster cannot be reached as configured (unknown, no URL)."""


class Replicator:
    """Replicates one loaded topic to one remote cluster while it runs."""

    def __init__(self, owner, remote: str, initial: int, clock=time.monotonic) -> None:
        self.owner = owner  # the topic's TopicReplication
        self.topic = owner.topic
        self.remote = remote
        self.initial = initial
        self.rate = RateMeter(clock)
        self.cursor: Cursor | None = None
        self.connected = False
        self.connected_since: str | None = None
        self.remote_url: str | None = None
        self.error: str | None = None
        self._wake = asyncio.Event()
        self._inflight: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        self._oldest_publish_ms: collections.deque[int] = collections.deque()  # of the entries in flight
        self._producer: RemoteProducer | None = None
        self._schema_versions: dict[bytes, bytes] = {}  # schema version here -> the remote's
        self._task = asyncio.ensure_future(self._run())

    # -- state -------------------------------------------------------------------------
    @property
    def acked_below(self) -> int:
        return self.cursor.acks.acked_below if self.cursor is not None else self.initial

    def backlog(self) -> int:
        """Messages of the stream the remote has not acknowledged (markers included)."""
        return max(0, self.topic.handle.next_offset() - self.acked_below)

    def delay_seconds(self) -> float:
        if not self._oldest_publish_ms:
            return 0.0
        return max(0.0, time.time() - self._oldest_publish_ms[0] / 1000)

    def wake(self) -> None:
        self._wake.set()

    async def stop(self, *, forget: bool = False) -> None:
        """Stop sending; what the remote acknowledged is persisted in the cursor, or with ``forget``
        (the cluster left the topic's replication) the cursor is dropped: it holds no retention."""
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):
            pass
        if self._producer is not None:
            await self._producer.close()
        if forget:
            cursor = self.cursor or await Cursor.load(self.owner.manager.meta, self.topic.stream_id,
                                                      cursor_name(self.remote), objects=self.owner.manager.objects)
            if cursor is not None:
                await cursor.delete()
            return
        if self.cursor is not None and self.cursor.dirty:
            try:
                await self.cursor.persist()
            except Exception as exc:  # the next replicator resumes from the remote's last sequence id
                log.info("%s -> %s: replication cursor not persisted at stop: %s", self.topic.name, self.remote, exc)

    # -- the loop ----------------------------------------------------------------------
    async def _run(self) -> None:
        delay = 0.1
        while True:
            try:
                await self._replicate()
                return
            except asyncio.CancelledError:
                raise
            except CursorFenced as exc:
                if self.topic.closed:
                    return
                # Another copy wrote the cursor (a write whose answer was lost, a broker that
                # served the topic a moment ago): read it again. The remote's deduplication
                # keeps a second sender, if there is one, from storing anything twice.
                log.warning("%s -> %s: replication cursor changed elsewhere, reading it again: %s",
                            self.topic.name, self.remote, exc)
                self.cursor = None
                self.connected = False
                await asyncio.sleep(delay)
                continue
            except Exception as exc:
                self.error = str(exc) or type(exc).__name__
                was_connected, self.connected = self.connected, False
                if was_connected:
                    delay = 0.1
                log.log(logging.WARNING if was_connected or delay >= MAX_BACKOFF else logging.INFO,
                        "%s -> %s: replication interrupted: %s (%s)", self.topic.name, self.remote, self.error,
                        type(exc).__name__, exc_info=log.isEnabledFor(logging.DEBUG))
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF)

    async def _replicate(self) -> None:
        client = await self.owner.manager.client(self.remote)
        self.remote_url = client.service_url
        if self.cursor is None:
            self.cursor, created = await Cursor.open(
                self.owner.manager.meta, self.topic.stream_id, cursor_name(self.remote), initial=self.initial,
                objects=self.owner.manager.objects)
            if created:
                log.info("%s: replicator to %s starts at offset %d", self.topic.name, self.remote, self.initial)
        await self.owner.ensure_remote_topic(client)
        self._producer = producer = RemoteProducer(client, str(self.topic.name),
                                                   producer_name(self.owner.manager.local_cluster))
        last_sequence = await producer.open()
        log.debug("%s -> %s: producer open, remote has up to %d", self.topic.name, self.remote, last_sequence)
        if last_sequence + 1 > self.cursor.acks.acked_below and last_sequence < self.topic.handle.next_offset():
            self.cursor.ack_cumulative(last_sequence)  # the remote has them already
        self.connected, self.error = True, None
        self.connected_since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self._inflight = asyncio.Queue(MAX_IN_FLIGHT)
        self._oldest_publish_ms.clear()
        sender = asyncio.ensure_future(self._send_loop(producer, self.cursor.acks.acked_below))
        acker = asyncio.ensure_future(self._ack_loop())
        try:
            done, _ = await asyncio.wait((sender, acker, producer.lost), return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is producer.lost:
                    raise task.result()  # a cut link: reconnect now, even with nothing to send
                task.result()
        finally:
            for task in (sender, acker):
                task.cancel()
            await asyncio.gather(sender, acker, return_exceptions=True)
            self._discard_inflight()
            await producer.close()
            self._producer = None

    async def _visible_end(self):
        end = self.topic.handle.next_offset()
        streams = self.owner.manager.stream_txns
        txns = await streams.view(self.topic.stream_id, end) if streams is not None else None
        return (min(end, txns.lso) if txns is not None else end), txns

    async def _send_loop(self, producer: RemoteProducer, position: int) -> None:
        local = self.owner.manager.local_cluster
        while True:
            end, txns = await self._visible_end()
            if position >= end:
                self._wake.clear()
                try:
                    await wait_for(self._wake.wait(), 1.0)
                except asyncio.TimeoutError:
                    pass
                continue
            try:
                fetched = (await self.topic.handle.fetch(position, end, max_bytes=READ_BYTES)).entries
            except OffsetOutOfRange:
                start = self.topic.handle.start_offset()
                log.warning("%s -> %s: offsets %d-%d were trimmed before they were replicated", self.topic.name,
                            self.remote, position, start)
                await self._inflight.put((start, None, 0, 0))  # acknowledged as if sent
                position = start
                continue
            skipped_to = None  # entries not sent are acknowledged with the next one sent, or at the end
            for entry in fetched:
                if entry.base_offset < position:
                    continue
                future, size = await self._send(producer, entry, txns, local)
                if future is None:
                    skipped_to = entry.end_offset
                else:
                    skipped_to = None
                    await self._inflight.put((entry.end_offset, future, size, entry.end_offset - entry.base_offset))
                position = entry.end_offset
            if skipped_to is not None:
                await self._inflight.put((skipped_to, None, 0, 0))
            await producer.drain()

    async def _send(self, producer: RemoteProducer, entry, txns, local: str):
        """Send ``entry`` on; (receipt future, payload bytes), the future None for an entry the remote
        must not get."""
        header, body = entries.split(entry.data)
        control = header.flags & _CONTROL
        if not control and visibility.hidden(header, entry.base_offset, txns):
            return None, 0
        meta = entries.metadata_of(body)
        if control and meta.marker_type not in SENT_MARKERS:
            return None, 0  # transaction markers and the like mean nothing over there
        if meta.replicated_from or (len(meta.replicate_to) and self.remote not in meta.replicate_to):
            return None, 0
        last = entry.end_offset - 1
        meta.producer_name = producer.name
        meta.sequence_id = entry.base_offset
        if meta.HasField("num_messages_in_batch"):
            meta.highest_sequence_id = last
        meta.replicated_from = local
        del meta.replicate_to[:]
        meta.ClearField("txnid_least_bits")  # committed: a plain record over there
        meta.ClearField("txnid_most_bits")
        if meta.schema_version:
            meta.schema_version = await self._remote_schema_version(producer, meta.schema_version)
        payload = entries.payload_of(body)
        future = producer.send(meta.SerializeToString(), payload, entry.base_offset, last,
                               entry.end_offset - entry.base_offset)
        future.add_done_callback(_retrieved)
        self._oldest_publish_ms.append(meta.publish_time)
        return future, payload.nbytes

    async def _remote_schema_version(self, producer: RemoteProducer, version: bytes) -> bytes:
        """The remote's version of the schema stored here as ``version`` (registered there once)."""
        known = self._schema_versions.get(version)
        if known is not None:
            return known
        info = await schemas.get(self.owner.manager.meta, self.topic.name, schemas.version_from_bytes(version))
        if info is None or info.deleted:
            return version  # unknown here: its consumers over there meet what ours would
        remote = await producer.schema_version(schemas.to_proto(info, str(self.topic.name.base)))
        self._schema_versions[version] = remote
        return remote

    async def _ack_loop(self) -> None:
        # The cursor is written at most once per PERSIST_SECONDS (a restart resumes from the
        # remote's last sequence id anyway), and once more when the queue stays empty that long.
        cursor = self.cursor
        persisted_at = time.monotonic()
        while True:
            try:
                end, future, size, messages = await wait_for(self._inflight.get(), PERSIST_SECONDS)
            except asyncio.TimeoutError:
                if cursor.dirty:
                    await _persist(cursor)
                    persisted_at = time.monotonic()
                continue
            if future is not None:
                await future
                self.rate.record(messages, size)
                if self._oldest_publish_ms:
                    self._oldest_publish_ms.popleft()
            if end > cursor.acks.acked_below:
                cursor.ack_cumulative(end - 1)
            if time.monotonic() - persisted_at >= PERSIST_SECONDS:
                await _persist(cursor)
                persisted_at = time.monotonic()

    def _discard_inflight(self) -> None:
        while not self._inflight.empty():
            _, future, _, _ = self._inflight.get_nowait()
            if future is not None and future.done() and not future.cancelled():
                future.exception()  # retrieved: it was answered by the failure that stopped us
            elif future is not None:
                future.cancel()
        self._oldest_publish_ms.clear()

    def stats(self) -> dict:
        """Pulsar's ``ReplicatorStats`` of this replicator."""
        rate, throughput = self.rate.rates()
        return {"msgRateIn": 0.0, "msgThroughputIn": 0.0, "msgRateOut": rate, "msgThroughputOut": throughput,
                "msgRateExpired": 0.0, "replicationBacklog": self.backlog(), "connected": self.connected,
                "replicationDelayInSeconds": int(self.delay_seconds()),
                "inboundConnection": None, "inboundConnectedSince": None,
                "outboundConnection": self.remote_url, "outboundConnectedSince": self.connected_since,
                "error": self.error}


async def _persist(cursor: Cursor) -> None:
    """Write the cursor; a cancellation (a cut link ends the loop) lets the write finish, so the
    cursor knows its record's version and the next write does not find it changed."""
    write = asyncio.ensure_future(cursor.persist())
    write.add_done_callback(_retrieved)
    await asyncio.shield(write)


def _retrieved(future: asyncio.Future) -> None:
    """Mark a receipt's failure as seen: the acknowledging loop may have stopped before it."""
    if not future.cancelled():
        future.exception()


__all__ = ["MAX_IN_FLIGHT", "ReplicationError", "Replicator", "cursor_name", "producer_name"]
