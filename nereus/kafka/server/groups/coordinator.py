"""The group coordinator: groups and committed offsets in metadata, written only conditionally.

Records: ``/nereus/kafka/groups/{group}`` holds a group's state (``group.py``); its
committed offsets are records of their own (``offsets.py``, which also says how a
commit is validated and written).

Several brokers share one metadata plane, and for a moment two of them may each
believe they coordinate a group (their views of the ring differ, or a broker
paused). So every write here is conditional on the version this broker last
read or wrote (``EXPECT_ABSENT`` for a record it saw absent); a version conflict
means another broker wrote the record behind this one's back.

Group state. A group's changes are written by one writer task at a time (the
newest state each time). A write that fails for another reason than a conflict
stays pending and is retried with exponential backoff; whoever waits for it keeps
waiting. JoinGroup answers (a new generation) and SyncGroup answers (assignments)
are sent only once the state they announce is durable. A conflict means another
broker took the group over: this broker drops its copy, answers the pending joins
and syncs NOT_COORDINATOR (clients look the coordinator up again and rejoin) and
reloads the group from metadata on its next request, as Kafka does for a
coordinator that lost a group.

Coordination. With several brokers, each group has one coordinator (the ring's
broker for it, asked through ``serves``); a broker drops its copy of a group the
ring moved away, at the group's next request or the next expiry pass, whichever
comes first. The conditional writes above stay the guard for the moments when two
brokers' rings disagree.

Memory. Groups are loaded on first use. An Empty group without members and with
nothing pending is dropped after ``idle_seconds`` without use, and at once (least
recently used first) when more than ``max_groups`` are held; either way it is
reloaded from metadata when next used. A group takes at most ``max_group_size``
members (Kafka's ``group.max.size``; a join beyond it is answered
GROUP_MAX_SIZE_REACHED), so a client cannot grow one without limit by joining
with new member ids.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable
from urllib.parse import unquote

from ....meta import EXPECT_ABSENT, UnexpectedVersion
from ....storage.records import subtree_ranges
from .group import Group
from .offsets import OFFSETS_ROOT, OffsetCommits, group_prefix
from .members import (CONSUMER_SESSION_TIMEOUT, COORDINATOR_NOT_AVAILABLE, DEAD, EMPTY, GROUP_ID_NOT_FOUND, GROUPS_ROOT,
                      NON_EMPTY_GROUP, NONE, NOT_COORDINATOR, GroupError, GroupLost, group_key)

log = logging.getLogger(__name__)

EXPIRY_INTERVAL = 0.5
IDLE_SECONDS = 300.0  # an unused empty group stays loaded this long
MAX_GROUPS = 10_000  # groups held in memory before idle ones are dropped at once
MAX_GROUP_SIZE = 10_000  # members of one group (Kafka's group.max.size)
RETRY_BACKOFF = (0.05, 5.0)  # first and longest wait between attempts of a failed group write
_END = "\U0010ffff"


@dataclass(frozen=True, slots=True)
class GroupListing:
    """A group as ListGroups shows it."""

    group_id: str
    state: str
    protocol_type: str | None
    group_type: str = "classic"


class GroupRecord:
    """What this broker knows of a group's metadata records, and the writes it still owes them."""

    __slots__ = ("version", "changes", "written", "waiters", "writer", "lost", "offsets", "commits", "last_used")

    def __init__(self, version: int, now: float) -> None:
        self.version = version  # of the group record as last read or written (EXPECT_ABSENT: none)
        self.changes = 0  # state changes asked to be written...
        self.written = 0  # ...and how many of them are durable
        self.waiters: list[tuple[int, asyncio.Future]] = []  # (change number, future)
        self.writer: asyncio.Task | None = None
        self.lost = False  # another broker wrote the group: this copy is dead
        self.offsets: dict[tuple[str, int], int] = {}  # offset record versions last read or written
        self.commits = asyncio.Lock()  # one commit request written at a time
        self.last_used = now

    @property
    def settled(self) -> bool:
        """Nothing waits to be written."""
        return (self.written == self.changes and (self.writer is None or self.writer.done())
                and not self.commits.locked())


class Coordinator(OffsetCommits):
    """Loads groups on first use, persists them with conditional writes, expires sessions and idle groups.

    ``clock`` (monotonic seconds) drives sessions and idleness; tests pass their own.
    """

    def __init__(self, meta, *, clock: Callable[[], float] = time.monotonic, idle_seconds: float = IDLE_SECONDS,
                 max_groups: int = MAX_GROUPS, max_group_size: int = MAX_GROUP_SIZE,
                 retry_backoff: tuple[float, float] = RETRY_BACKOFF,
                 initial_rebalance_delay: float | None = None,
                 serves: Callable[[str], bool] | None = None,
                 consumer_session_timeout: float = CONSUMER_SESSION_TIMEOUT) -> None:
        self.meta = meta
        self.consumer_session_timeout = consumer_session_timeout  # KIP-848 members (seconds)
        self.serves = serves  # is this broker the group's coordinator (None: of every group)
        self.clock = clock
        self.idle_seconds = idle_seconds
        self.max_groups = max_groups
        self.max_group_size = max_group_size
        self.retry_backoff = retry_backoff
        self.initial_rebalance_delay = initial_rebalance_delay
        self.groups: OrderedDict[str, Group] = OrderedDict()  # least recently used first
        self._loading: dict[str, asyncio.Future] = {}
        self._tasks: set[asyncio.Task] = set()
        self._expiry: asyncio.Task | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._expiry = self.spawn(self._expire_loop(), "session expiry")

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop expiring; give pending group writes ``timeout`` seconds, then cancel them."""
        if self._expiry is not None:
            self._expiry.cancel()
        writers = [t for t in self._tasks if t is not self._expiry]
        if writers:
            _done, pending = await asyncio.wait(writers, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("kafka coordinator: %d group write(s) not done at shutdown", len(pending))
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def spawn(self, coro, what: str) -> asyncio.Task:
        """A background task whose failure is always retrieved and logged."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)

        def reap(t: asyncio.Task) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("kafka coordinator: %s failed", what, exc_info=t.exception())

        task.add_done_callback(reap)
        return task

    def is_coordinator(self, group_id: str) -> bool:
        return self.serves is None or self.serves(group_id)

    def coordinates(self, group_id: str) -> bool:
        """True if this broker is the group's coordinator; if not, its copy of the group is dropped.

        A group the ring moved away is reloaded from metadata if it ever comes back, so
        this broker never answers from a copy another coordinator has changed since.
        """
        if self.is_coordinator(group_id):
            return True
        self.release(group_id, "the ring moved its coordinator to another broker")
        return False

    # -- the groups held --------------------------------------------------------------------
    async def group(self, group_id: str, create: bool = True) -> Group | None:
        """The group (loaded from metadata on first use); None if absent and not ``create``.

        Raises GroupError(COORDINATOR_NOT_AVAILABLE) when metadata cannot be read.
        """
        group = self.groups.get(group_id)
        if group is None:
            loading = self._loading.get(group_id)
            if loading is None:
                loading = self._loading[group_id] = asyncio.ensure_future(self._load(group_id))
                loading.add_done_callback(lambda f: (self._loading.pop(group_id, None),
                                                     None if f.cancelled() else f.exception()))
            try:
                group = await asyncio.shield(loading)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("kafka group %s: loading failed: %s", group_id, exc)
                raise GroupError(COORDINATOR_NOT_AVAILABLE) from exc
            if group is None:
                group = self.groups.get(group_id)  # created meanwhile by another request
                if group is None:
                    if not create:
                        return None
                    group = self._adopt(Group(self, group_id, GroupRecord(EXPECT_ABSENT, self.clock())))
        group.record.last_used = self.clock()
        self.groups.move_to_end(group_id)
        return group

    async def _load(self, group_id: str) -> Group | None:
        rec = await self.meta.get(group_key(group_id))
        existing = self.groups.get(group_id)
        if existing is not None:
            return existing
        if rec is None:
            return None
        group = Group(self, group_id, GroupRecord(rec.version.version_id, self.clock()))
        group.restore(rec.value)
        return self._adopt(group)

    def _adopt(self, group: Group) -> Group:
        self.groups[group.group_id] = group
        if len(self.groups) > self.max_groups:
            self._shrink(len(self.groups) - self.max_groups)
        return group

    def _shrink(self, excess: int, scan: int = 1024) -> None:
        """Drop up to ``excess`` idle groups, least recently used first (looking at ``scan`` at most)."""
        victims = []
        for index, (group_id, group) in enumerate(self.groups.items()):
            if len(victims) >= excess or index >= scan:
                break
            if group.idle:
                victims.append(group_id)
        for group_id in victims:
            del self.groups[group_id]

    def evict_idle(self, now: float | None = None) -> int:
        """Drop idle groups unused for ``idle_seconds``; returns how many."""
        now = self.clock() if now is None else now
        victims = []
        for group_id, group in self.groups.items():
            if now - group.record.last_used < self.idle_seconds:
                break  # least recently used first: the rest are newer
            if group.idle:
                victims.append(group_id)
        for group_id in victims:
            del self.groups[group_id]
        return len(victims)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL)
            self.expire()

    def expire(self) -> None:
        """One pass: drop groups another broker coordinates now, members whose session timed out, idle groups."""
        now = self.clock()
        if self.serves is not None:
            # Also the groups nobody asked about since the ring moved them: a stale copy
            # must not be served if the group ever comes back to this broker.
            for group_id in [g for g in self.groups if not self.serves(g)]:
                self.release(group_id, "the ring moved its coordinator to another broker")
        for group in list(self.groups.values()):
            if group.members or group.consumer_members:
                try:
                    group.expire(now)
                except Exception:
                    log.exception("kafka group %s: expiry failed", group.group_id)
        self.evict_idle(now)

    # -- writing group state ----------------------------------------------------------------
    def persist(self, group: Group, wait: bool = False) -> asyncio.Future | None:
        """Write the group's state (in the background); with ``wait``, a future done once it is durable.

        The future fails with GroupLost if another broker wrote the group first.
        """
        rec = group.record
        if rec.lost:
            return self._failed(group) if wait else None
        rec.changes += 1
        if rec.writer is None or rec.writer.done():
            rec.writer = self.spawn(self._write(group), f"writing group {group.group_id}")
        return self._waiter(rec, rec.changes) if wait else None

    def durable(self, group: Group) -> asyncio.Future:
        """A future done once every change asked so far is written (GroupLost if the group was lost)."""
        rec = group.record
        if rec.lost:
            return self._failed(group)
        return self._waiter(rec, rec.changes)

    def _waiter(self, rec: GroupRecord, change: int) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        if rec.written >= change:
            fut.set_result(None)
        else:
            rec.waiters.append((change, fut))
        return fut

    def _failed(self, group: Group) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        fut.set_exception(GroupLost(group.group_id))
        return fut

    async def _write(self, group: Group) -> None:
        rec = group.record
        delay = self.retry_backoff[0]
        while rec.written < rec.changes and not rec.lost and group.state != DEAD:
            change = rec.changes
            try:
                result = await self.meta.put(group_key(group.group_id), group.to_json(),
                                             expected_version_id=rec.version)
            except UnexpectedVersion:
                self._lose(group, "its record was written by another broker")
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("kafka group %s: writing its state failed (%s); retrying in %.2fs", group.group_id, exc,
                            delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_backoff[1])
                continue
            delay = self.retry_backoff[0]
            rec.version = result.version.version_id
            rec.written = change
            still = []
            for waited, fut in rec.waiters:
                if waited <= change:
                    if not fut.done():
                        fut.set_result(None)
                else:
                    still.append((waited, fut))
            rec.waiters = still

    def release(self, group_id: str, why: str) -> None:
        """This broker no longer coordinates the group: drop its copy (reloaded from metadata if it returns)."""
        group = self.groups.get(group_id)
        if group is not None:
            self._lose(group, why, level=logging.INFO)  # expected when brokers come and go

    def _lose(self, group: Group, why: str, level: int = logging.WARNING) -> None:
        """Another broker owns the group now: stop serving this copy; the next request reloads it."""
        rec = group.record
        if rec.lost:
            return
        rec.lost = True
        log.log(level, "kafka group %s: %s; answering NOT_COORDINATOR and reloading it", group.group_id, why)
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]
        group.abandon(NOT_COORDINATOR)
        for _change, fut in rec.waiters:
            if not fut.done():
                fut.set_exception(GroupLost(group.group_id))
        rec.waiters = []

    async def _still_owned(self, group: Group) -> bool:
        """True if the group record is still the version this broker wrote or read (else the group is lost)."""
        try:
            await self.durable(group)
        except GroupLost:
            return False
        current = await self.meta.get(group_key(group.group_id), include_value=False)
        version = EXPECT_ABSENT if current is None else current.version.version_id
        if group.record.lost:
            return False
        if version != group.record.version:
            self._lose(group, "its record changed")
            return False
        return True

    # -- listing and deleting -----------------------------------------------------------------
    async def list_groups(self) -> list[GroupListing]:
        """Every group with a record or committed offsets (not loaded into memory for this)."""
        found: dict[str, GroupListing] = {}
        async for rec in self.meta.range_scan(GROUPS_ROOT, GROUPS_ROOT + _END):
            group_id = unquote(rec.key[len(GROUPS_ROOT):])
            value = json.loads(rec.value)
            consumer = (value.get("consumer") or {}).get("members")
            state = EMPTY if not value["members"] and not consumer else value["state"]
            found[group_id] = GroupListing(group_id, "Stable" if consumer else state, value["protocol_type"],
                                           "consumer" if consumer else "classic")
        lo, hi = subtree_ranges(OFFSETS_ROOT.rstrip("/"))[1]  # keys two levels below the root
        async for key in self.meta.list(lo, hi):
            group_id = unquote(key[len(OFFSETS_ROOT):].split("/", 1)[0])
            found.setdefault(group_id, GroupListing(group_id, EMPTY, None))
        for group_id, group in self.groups.items():  # the loaded copies are newer than their records
            if not group.gone:
                found[group_id] = GroupListing(group_id, group.described_state, group.protocol_type,
                                               "consumer" if group.is_consumer else "classic")
        return [found[g] for g in sorted(found)]

    async def has_offsets(self, group_id: str) -> bool:
        """Whether the group has committed offsets (a group with no record but offsets is empty, not dead)."""
        prefix = group_prefix(group_id)
        return bool(await self.meta.list_page(prefix, prefix + _END, limit=1))

    async def group_now(self, group_id: str) -> Group | None:
        """``group(group_id, create=False)`` without the members whose session ran out by now.

        The background pass ends sessions every ``EXPIRY_INTERVAL``; a describe or a delete sees
        them end at their deadline, as a Kafka coordinator's per-member timers do (a client that
        waits out a session timeout and deletes the group finds it empty)."""
        group = await self.group(group_id, create=False)
        if group is not None and (group.members or group.consumer_members):
            group.expire(self.clock())
        return group

    async def delete_group(self, group_id: str) -> int:
        """DeleteGroups for one group: the Kafka error code."""
        try:
            group = await self.group_now(group_id)
        except GroupError as exc:
            return exc.code
        prefix = group_prefix(group_id)
        offsets = [rec async for rec in self.meta.range_scan(prefix, prefix + _END)]
        if group is None and not offsets:
            return GROUP_ID_NOT_FOUND
        if group is not None:
            if group.state != EMPTY or group.members or group.consumer_members:
                return NON_EMPTY_GROUP
            async with group.record.commits:  # no commit of this broker in flight
                try:
                    await self.durable(group)
                except GroupLost:
                    return NOT_COORDINATOR
                if group.state != EMPTY or group.members or group.consumer_members:
                    return NON_EMPTY_GROUP  # joined while we waited
                group.state = DEAD
                if self.groups.get(group_id) is group:
                    del self.groups[group_id]
                try:
                    await self.meta.delete(group_key(group_id), expected_version_id=group.record.version)
                except UnexpectedVersion:
                    log.warning("kafka group %s: not deleted, another broker wrote it", group_id)
                    return NOT_COORDINATOR
            offsets = [rec async for rec in self.meta.range_scan(prefix, prefix + _END)]
        for rec in offsets:
            try:
                await self.meta.delete(rec.key, expected_version_id=rec.version.version_id)
            except UnexpectedVersion:
                log.warning("kafka group %s: an offset was committed while the group was deleted", group_id)
                return NOT_COORDINATOR
        return NONE


__all__ = ["Coordinator", "GroupListing", "GroupRecord"]
