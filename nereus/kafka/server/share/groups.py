"""The share groups of one broker: memberships, share-partitions and share sessions.

A share group on topic T is a durable subscription on each partition's stream, named
after the group (the group id itself), so Pulsar's admin lists it with its backlog and
retention keeps what it has not acknowledged. Kafka acknowledgements are individual
acks on that cursor (``partition.py``); the cursor is persisted before an
acknowledgement is answered. The share-partitions of a partition live on the broker
serving it, memberships on the group's coordinator.

Share sessions (KIP-932) are per (group, member) on this broker: epoch 0 opens one
(replacing and releasing the previous), each request carries the next epoch, -1 closes
it and releases what the member still holds.

Each share group also has a record under ``SHARE_GROUPS_ROOT`` (written before its
first cursor), so a broker lists and describes the groups it has state for before any
member comes back, as Kafka lists every group it knows.

Broker configs (dynamic, ``IncrementalAlterConfigs`` on the broker):
``group.share.record.lock.duration.ms`` (30 s), ``group.share.delivery.count.limit``
(5), ``group.share.partition.max.record.locks`` (2000); the first two are the defaults
of the group configs ``share.record.lock.duration.ms`` and ``share.delivery.count.limit``,
set with ``share.auto.offset.reset`` (``latest``; ``earliest``) and ``share.isolation.level``
(``read_uncommitted``; ``read_committed``: nothing past the last stable offset, aborted transactions'
records archived undelivered) on a GROUP resource.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from ....ledger.cursor import Cursor
from ....ledger.errors import CursorFenced
from ....meta import Notification
from ..catalog import config_defs as defs
from .group import ShareGroupState
from .partition import SharePartition

log = logging.getLogger(__name__)

MAX_LOCKS = "group.share.partition.max.record.locks"
MAX_SESSION_EPOCH = 0x7FFFFFFF
SHARE_GROUPS_ROOT = "/nereus/kafka/share-groups/"
STREAMS_PREFIX = "/nereus/s/"  # where cursor records live (``ledger.cursor.cursor_key``)
CURSOR_INFIX = "/cursor/"
_END = "\U0010ffff"


def share_group_key(group_id: str) -> str:
    return SHARE_GROUPS_ROOT + quote(group_id, safe="")


@dataclass
class ShareSession:
    epoch: int = 1  # the epoch the next request must carry
    partitions: set[tuple[str, int]] = field(default_factory=set)  # (topic name, partition)


@dataclass
class ShareSettings:
    lock_seconds: float
    delivery_limit: int
    max_locks: int
    from_earliest: bool = False  # share.auto.offset.reset: where a new share-partition starts
    read_committed: bool = False  # share.isolation.level: only committed transactional records


class ShareGroups:
    """Share groups as seen by one broker."""

    def __init__(self, meta, storage, configs, clock=time.monotonic) -> None:
        self.meta = meta
        self.storage = storage
        self.configs = configs  # TopicConfigs: the share settings of each group and of the broker
        self.clock = clock
        self.groups: dict[str, ShareGroupState] = {}
        self.partitions: dict[tuple[str, str, int], tuple[int, SharePartition]] = {}  # -> (stream id, state)
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self._loading: dict[tuple[str, str, int], asyncio.Lock] = {}
        self._changed = asyncio.Event()
        self._recorded: set[str] = set()  # groups whose record this broker has seen or written
        # (group, stream id) of loaded share-partitions whose cursor may have been written
        # elsewhere (AlterShareGroupOffsets / DeleteShareGroupOffsets on the group's
        # coordinator): checked against the metadata plane on next use.
        self.suspects: set[tuple[str, int]] = set()

    # -- the stored list of share groups -------------------------------------------------------
    async def record(self, group_id: str) -> None:
        """Make sure ``group_id`` has its share-group record (before it gets state anywhere)."""
        if group_id in self._recorded:
            return
        await self.meta.put(share_group_key(group_id), b"{}")
        self._recorded.add(group_id)

    async def forget(self, group_id: str) -> None:
        """The share group was deleted: drop its record."""
        self._recorded.discard(group_id)
        await self.meta.delete(share_group_key(group_id))

    async def stored(self) -> list[str]:
        """Every share group with a record, loaded here or not."""
        return [unquote(key[len(SHARE_GROUPS_ROOT):])
                async for key in self.meta.list(SHARE_GROUPS_ROOT, SHARE_GROUPS_ROOT + _END)]

    async def known(self, group_id: str) -> bool:
        if group_id in self.groups or group_id in self._recorded:
            return True
        return await self.meta.get(share_group_key(group_id), include_value=False) is not None

    # -- settings and wake-ups ------------------------------------------------------------------
    async def settings(self, group_id: str) -> ShareSettings:
        configs = self.configs
        broker = defs.resolve_broker(await configs.broker_layers())
        group = await configs.group(group_id)
        return ShareSettings(int(group["share.record.lock.duration.ms"].value) / 1000,
                             int(group["share.delivery.count.limit"].value), int(broker[MAX_LOCKS].value),
                             group["share.auto.offset.reset"].value == "earliest",
                             group["share.isolation.level"].value == "read_committed")

    def notify(self) -> None:
        """Records may have become available (released, expired, a member left): wake long polls."""
        self._changed.set()
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        return self._changed

    # -- memberships ---------------------------------------------------------------------------
    def group(self, group_id: str) -> ShareGroupState:
        state = self.groups.get(group_id)
        if state is None:
            state = self.groups[group_id] = ShareGroupState(group_id)
        return state

    def member_gone(self, group_id: str, member_id: str) -> None:
        """A member left or timed out: its session ends and what it holds is released."""
        self.sessions.pop((group_id, member_id), None)
        for (group, _, _), (_, sp) in self.partitions.items():
            if group == group_id and sp.release_member(member_id):
                self.notify()

    # -- share-partitions ------------------------------------------------------------------------
    def note_cursor(self, note: Notification) -> None:
        """A metadata notification of a key under the streams' root: when it is the cursor
        of a share-partition loaded here and not this broker's own last write of it, the
        share-partition is checked before its next use (another broker altered or
        deleted the group's offsets)."""
        if not self.partitions or CURSOR_INFIX not in note.key:
            return
        head, _, quoted = note.key.rpartition(CURSOR_INFIX)
        try:
            stream_id = int(head.rsplit("/", 1)[1])
        except ValueError:
            return
        group_id = unquote(quoted)
        for (group, _, _), (sid, sp) in self.partitions.items():
            if group == group_id and sid == stream_id and (note.version_id is None
                                                           or note.version_id != sp.cursor.version_id):
                self.suspects.add((group, sid))

    def suspect_group(self, group_id: str) -> None:
        """Check each loaded share-partition of ``group_id`` before its next use."""
        self.suspects.update((g, sid) for (g, _, _), (sid, _) in self.partitions.items() if g == group_id)

    async def share_partition(self, group_id: str, topic: str, part, settings: ShareSettings) -> SharePartition:
        """The share-partition of ``group_id`` on the loaded partition ``part``, its cursor opened
        (again, if its durable record changed elsewhere since it was loaded here)."""
        key = (group_id, topic, part.index)
        lock = self._loading.setdefault(key, asyncio.Lock())
        async with lock:
            held = self.partitions.get(key)
            stream_id = part.handle.stream_id
            if held is not None and (group_id, held[0]) in self.suspects:
                self.suspects.discard((group_id, held[0]))
                if not await held[1].cursor.verify():
                    log.info("kafka: share group %s: %s-%d changed elsewhere; reloaded", group_id, topic, part.index)
            if held is None or held[0] != stream_id or held[1].cursor.fenced:
                await self.record(group_id)
                cursor, created = await Cursor.open(
                    self.meta, stream_id, group_id,
                    initial=part.handle.start_offset() if settings.from_earliest else part.handle.next_offset(),
                    properties={"kafka.share.group": group_id}, objects=self.storage.objects)
                if created:
                    log.info("kafka: share group %s subscribed to %s-%d at offset %d", group_id, topic, part.index,
                             cursor.acks.acked_below)
                held = self.partitions[key] = (stream_id, SharePartition(
                    cursor, lock_seconds=settings.lock_seconds, delivery_limit=settings.delivery_limit))
                if cursor.dirty:  # records held at the delivery limit when their broker stopped: archived
                    await self.persist([held[1]])
            sp = held[1]
            sp.lock_seconds, sp.delivery_limit, sp.max_in_flight = (settings.lock_seconds, settings.delivery_limit,
                                                                    settings.max_locks)
            return sp

    async def persist(self, sps: list[SharePartition]) -> None:
        """Make the acknowledgements on ``sps`` durable; a fenced cursor is reloaded on next use."""
        results = await asyncio.gather(*(sp.cursor.persist() for sp in sps if sp.cursor.dirty),
                                       return_exceptions=True)
        for result in results:
            if isinstance(result, CursorFenced):
                log.warning("kafka: %s; the share-partition is reloaded", result)
                raise result
            if isinstance(result, BaseException):
                raise result

    def held_by(self, group_id: str, member_id: str) -> list[SharePartition]:
        return [sp for (g, _, _), (_, sp) in self.partitions.items()
                if g == group_id and any(f.member == member_id for f in sp.in_flight.values())]

    # -- share sessions ---------------------------------------------------------------------------
    def open_session(self, group_id: str, member_id: str) -> ShareSession:
        # A member (re)joining: the group may have been empty, and its offsets altered
        # through another broker, since this broker loaded its share-partitions.
        self.suspect_group(group_id)
        if (group_id, member_id) in self.sessions:
            self.member_gone(group_id, member_id)
        session = self.sessions[(group_id, member_id)] = ShareSession()
        return session

    def close_session(self, group_id: str, member_id: str) -> None:
        self.member_gone(group_id, member_id)
        self.forget_idle(group_id)

    def forget_idle(self, group_id: str) -> None:
        """Without sessions here, drop the group's share-partitions that hold nothing unsaved.

        They are reloaded from their cursors on next use.
        """
        if any(g == group_id for g, _ in self.sessions):
            return
        for key, (sid, sp) in list(self.partitions.items()):
            if key[0] == group_id and not sp.in_flight and not sp.cursor.dirty:
                del self.partitions[key]
                self.suspects.discard((group_id, sid))
                lock = self._loading.get(key)
                if lock is not None and not lock.locked():
                    del self._loading[key]
        group = self.groups.get(group_id)
        if group is not None and not group.members:
            del self.groups[group_id]

    async def close(self) -> None:
        """Persist what was acknowledged (the locks are given up: their records are redelivered)."""
        try:
            await self.persist([sp for _, sp in self.partitions.values()])
        except Exception:
            log.exception("kafka: share group cursors not persisted at stop")
        self.partitions.clear()
        self.sessions.clear()


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= MAX_SESSION_EPOCH else epoch + 1


__all__ = ["MAX_LOCKS", "SHARE_GROUPS_ROOT", "STREAMS_PREFIX", "ShareGroups", "ShareSession",
           "ShareSettings", "next_epoch"]
