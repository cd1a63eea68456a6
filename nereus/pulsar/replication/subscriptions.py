"""Replicated subscriptions: a subscription's position carried to the other clusters (Pulsar's PIP-33).

Offsets differ between clusters, so positions are mapped through snapshots taken with
markers that travel the replicated topic itself:

1. While the topic has a replicated subscription and new entries, its owner appends a
   SNAPSHOT_REQUEST marker every ``SNAPSHOT_SECONDS``, sent to every remote cluster.
2. A cluster that stores such a request answers with a SNAPSHOT_RESPONSE marker sent back
   to the asking cluster only, naming where the request landed in its own topic.
3. When every remote answered, the snapshot is complete: {here: where the last response
   landed, each remote: its answer}. Everything before the local position was in this
   topic after the request reached each remote, so acknowledging up to it here is
   acknowledging up to the answers there.
4. When a replicated subscription's mark-delete passes a snapshot's local position, an
   UPDATE marker carries the snapshot's remote positions to the other clusters, where
   the subscription of that name (made if missing) is moved forward to them.

A consumer that moves to another cluster therefore resumes no earlier than the last
snapshot its subscription passed: at least once, duplicates bounded by the snapshot
frequency. Markers are CONTROL entries: consumers of either protocol never see them.
Snapshots are kept in memory (a restart takes new ones within a second or two).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
import uuid
from dataclasses import dataclass, field

from ...codec.pulsar import encode_entry, pb
from ...ledger.cursor import Cursor
from ...ledger.entry import EntryFlags, EntryFormat, EntryHeader
from ...ledger.subscription import SubType
from ..server.consumers import REPLICATED_SUBSCRIPTION

log = logging.getLogger(__name__)

#: The cursor property that makes a subscription replicated (Pulsar's name).
REPLICATED_PROPERTY = REPLICATED_SUBSCRIPTION
#: Pulsar's replicatedSubscriptionsSnapshotFrequencyMillis (1 s).
SNAPSHOT_SECONDS = 1.0
#: Pulsar's replicatedSubscriptionsSnapshotTimeoutSeconds: a snapshot not completed by then is dropped.
SNAPSHOT_TIMEOUT_SECONDS = 30.0
#: Completed snapshots kept per topic (Pulsar keeps 10 per subscription).
MAX_SNAPSHOTS = 30
#: The markers replicators send on (the completed snapshot stays local).
SENT_MARKERS = frozenset({pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST, pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE,
                          pb.REPLICATED_SUBSCRIPTION_UPDATE})
MARKER_PRODUCER = "pulsar.repl.marker"


def is_replicated(cursor) -> bool:
    return bool(cursor.properties.get(REPLICATED_PROPERTY))


def marker_entry(marker_type: int, payload: bytes, replicate_to: list[str]) -> bytes:
    """The stored form of a marker entry (a CONTROL entry of one record)."""
    now = int(time.time() * 1000)
    meta = pb.MessageMetadata(producer_name=MARKER_PRODUCER, sequence_id=0, publish_time=now,
                              marker_type=marker_type, replicate_to=replicate_to)
    header = EntryHeader(EntryFormat.PULSAR, 1, first_timestamp=now, max_timestamp=now, flags=EntryFlags.CONTROL)
    return b"".join([header.pack(), *(bytes(part) for part in encode_entry(meta, payload))])


def _position(stream_id: int, offset: int) -> pb.MessageIdData:
    return pb.MessageIdData(ledgerId=stream_id, entryId=offset)


@dataclass
class _Pending:
    snapshot_id: str
    waiting: set[str]
    started: float
    answers: dict[str, int] = field(default_factory=dict)


@dataclass
class Snapshot:
    snapshot_id: str
    local: int  # offset here
    remotes: dict[str, int]  # cluster -> offset there


class ReplicatedSubscriptions:
    """The snapshots and updates of one loaded topic's replicated subscriptions."""

    def __init__(self, owner, clock=time.monotonic) -> None:
        self.owner = owner  # the topic's TopicReplication
        self.topic = owner.topic
        self.clock = clock
        self.pending: dict[str, _Pending] = {}
        self.snapshots: collections.deque[Snapshot] = collections.deque(maxlen=MAX_SNAPSHOTS)
        self._sent: dict[str, str] = {}  # subscription -> id of the snapshot its last update carried
        self._snapshot_end = -1  # the topic's end, markers left out, when the last request was appended
        self._markers = 0  # marker records in the topic since load: they alone call for no new snapshot
        self._task: asyncio.Task | None = None

    @property
    def local(self) -> str:
        return self.owner.manager.local_cluster

    def _pulsar(self):
        return self.topic.attachments.get("pulsar")

    def replicated_dispatchers(self) -> list:
        pulsar = self._pulsar()
        if pulsar is None:
            return []
        return [d for d in list(pulsar.dispatchers.values()) if d.sub.cursor.durable and is_replicated(d.sub.cursor)]

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(SNAPSHOT_SECONDS)
            try:
                await self.tick()
            except Exception as exc:  # the next tick tries again
                log.warning("%s: replicated subscriptions: %s", self.topic.name, exc)

    async def tick(self) -> None:
        """One round: drop stale snapshots in progress, ask for a new one, send updates."""
        now = self.clock()
        for snapshot_id, pending in list(self.pending.items()):
            if now - pending.started > SNAPSHOT_TIMEOUT_SECONDS:
                del self.pending[snapshot_id]
        dispatchers = self.replicated_dispatchers()
        remotes = sorted(r for r, rep in self.owner.replicators.items() if rep.connected)
        if not dispatchers or not remotes:
            return
        if self._data_end() != self._snapshot_end and not self.pending:
            await self._request(remotes)
            self._snapshot_end = self._data_end()
        for dispatcher in dispatchers:
            await self._update(dispatcher, remotes)

    def _data_end(self) -> int:
        return self.topic.handle.next_offset() - self._markers

    async def _append(self, marker_type: int, message, replicate_to: list[str]) -> int:
        await self.topic.ensure_writer()
        self._markers += 1
        data = marker_entry(marker_type, message.SerializeToString(), replicate_to)
        return (await self.topic.append(data, 1)).base_offset

    async def _request(self, remotes: list[str]) -> None:
        snapshot_id = uuid.uuid4().hex
        self.pending[snapshot_id] = _Pending(snapshot_id, set(remotes), self.clock())
        request = pb.ReplicatedSubscriptionsSnapshotRequest(snapshot_id=snapshot_id, source_cluster=self.local)
        await self._append(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST, request, remotes)

    async def _update(self, dispatcher, remotes: list[str]) -> None:
        acked_below = dispatcher.sub.cursor.acks.acked_below
        passed = None
        for snapshot in self.snapshots:
            if snapshot.local < acked_below:
                passed = snapshot  # the newest one the subscription passed (they are in order)
        name = dispatcher.sub.name
        if passed is None or self._sent.get(name) == passed.snapshot_id:
            return
        update = pb.ReplicatedSubscriptionsUpdate(subscription_name=name, clusters=[
            pb.ClusterMessageId(cluster=cluster, message_id=_position(0, offset))
            for cluster, offset in sorted(passed.remotes.items())])
        await self._append(pb.REPLICATED_SUBSCRIPTION_UPDATE, update, remotes)
        self._sent[name] = passed.snapshot_id
        log.debug("%s: subscription %s passed snapshot %s (%d here): update sent", self.topic.name, name,
                  passed.snapshot_id, passed.local)

    # -- markers that came from other clusters --------------------------------------------
    async def marker_stored(self, marker_type: int, payload: bytes, offset: int) -> None:
        """A marker a remote replicator stored at ``offset`` here."""
        log.debug("%s: marker %d stored at %d", self.topic.name, marker_type, offset)
        self._markers += 1
        if marker_type == pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST:
            request = pb.ReplicatedSubscriptionsSnapshotRequest.FromString(payload)
            if request.source_cluster and request.source_cluster != self.local:
                response = pb.ReplicatedSubscriptionsSnapshotResponse(
                    snapshot_id=request.snapshot_id,
                    cluster=pb.ClusterMessageId(cluster=self.local,
                                                message_id=_position(self.topic.stream_id, offset)))
                await self._append(pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE, response, [request.source_cluster])
        elif marker_type == pb.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE:
            response = pb.ReplicatedSubscriptionsSnapshotResponse.FromString(payload)
            pending = self.pending.get(response.snapshot_id)
            if pending is None:
                return  # timed out, or not ours
            cluster = response.cluster.cluster
            pending.answers[cluster] = response.cluster.message_id.entryId
            pending.waiting.discard(cluster)
            if not pending.waiting:
                del self.pending[response.snapshot_id]
                self.snapshots.append(Snapshot(response.snapshot_id, offset, dict(pending.answers)))
                log.debug("%s: snapshot %s: here %d, %s", self.topic.name, response.snapshot_id, offset,
                          pending.answers)
        elif marker_type == pb.REPLICATED_SUBSCRIPTION_UPDATE:
            update = pb.ReplicatedSubscriptionsUpdate.FromString(payload)
            for cluster in update.clusters:
                if cluster.cluster == self.local:
                    await self._move(update.subscription_name, cluster.message_id.entryId)

    async def _move(self, name: str, position: int) -> None:
        """Move subscription ``name`` forward to ``position`` (inclusive), making it if missing."""
        pulsar = self._pulsar()
        if pulsar is not None:
            dispatcher = await pulsar.subscription(name, SubType.EXCLUSIVE, durable=True, initial=position + 1,
                                                   properties={REPLICATED_PROPERTY: True})
            cursor = dispatcher.sub.cursor
        else:
            cursor, _ = await Cursor.open(self.owner.manager.meta, self.topic.stream_id, name, initial=position + 1,
                                          properties={REPLICATED_PROPERTY: True},
                                          objects=self.owner.manager.objects)
            dispatcher = None
        if position >= cursor.acks.acked_below:
            cursor.ack_cumulative(position)
            cursor.read_position = max(cursor.read_position, position + 1)
            if not is_replicated(cursor):
                cursor.set_property(REPLICATED_PROPERTY, True)
            await cursor.persist()
            if dispatcher is not None:
                dispatcher.wake()
            log.debug("%s: replicated subscription %s moved to %d", self.topic.name, name, position)


__all__ = ["MARKER_PRODUCER", "REPLICATED_PROPERTY", "SENT_MARKERS", "ReplicatedSubscriptions", "Snapshot",
           "is_replicated", "marker_entry"]
