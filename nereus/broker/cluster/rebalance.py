"""Rebalancing and failover: topics follow the ring.

When the ring moves a topic elsewhere (a broker joined, or this one drains), its owner
hands it over; a claimed topic no client loaded is released after a while. When an owner
dies (its listener refuses connections) or its records vanish with its session, each
broker adopts the topics its ring now gives it: their ownership records are claimed
together, a thousand in one batched write, and each topic is loaded when a client first
asks for it, as Pulsar loads the topics of a bundle it took over. Loading takes the
stream's append session, which fences the dead owner (or a zombie that wakes up) before
the new owner's first write. Loading every adopted topic at once would cost about twenty
metadata operations each: a broker's hundreds of thousands of topics would keep the
metadata plane busy for minutes, with the lookups of the topics clients do use queued
behind them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from urllib.parse import unquote

from ...meta import EXPECT_ABSENT, PutOp, PutResult
from ...meta.api import Notification, NotificationType
from ...meta.errors import MetadataError, UnexpectedVersion
from ...tasks import spawn, wait_for
from .claims import Claims
from .membership import ACTIVE, BrokerRecord
from .owner_lookup import OWNED_BY, OWNERS, owner_key, owner_tag

log = logging.getLogger(__name__)

ORPHAN_SECONDS = 60.0  # how long a topic whose owner vanished is kept in case the ring gives it to us
UNUSED_SECONDS = 60.0  # a claimed topic no client loaded is released after this long
DEPARTURES_KEPT = 64  # departed incarnations remembered as looked at
ADOPTION_BATCH = 1000  # ownership records claimed in one batched write
# Batches under way at once. More would make adoption faster where the metadata plane has room;
# but claims queued at its shards delay every request behind them, the lookups and loads of the
# topics clients ask for first included. Measured with 300,000 topics on one metadata process
# while claims still waited for the dead broker's lease (bench/RESULTS.md, third round): all owned
# again after 30-32 s with four, 33 s with two or one; the first lookups 1-3 s later with four.
ADOPTION_BATCHES = 4


class Rebalancing(Claims):
    """The rebalancing loop (``start`` to ``stop``) and the adoption of orphaned topics."""

    rebalance_delay: float
    rebalance_interval: float
    adoptions: int
    _ring_changed: asyncio.Event
    _departures: dict[tuple[str, str], None]
    _orphan_versions: dict[str, int]  # orphans found by their dead owner: the version of its record
    _adoption_batches: asyncio.Semaphore  # ADOPTION_BATCHES
    _homes_checked: tuple[object, float]  # the ring the owned topics' homes were checked against, and when

    def _owner_note(self, note: Notification) -> None:
        self._record_changed(note.key)
        if note.type != NotificationType.KEY_DELETED:
            return
        topic = unquote(note.key[len(OWNERS):])
        if self._released.pop(topic, None) is not None:
            return  # released here (idle, unused, moved): adopting it would load it again
        if topic not in self.owned and topic not in self._releasing:
            self._orphans[topic] = time.monotonic()
            self._orphan_versions.pop(topic, None)  # gone: claimed if absent
            self._ring_changed.set()

    async def _rebalance_loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_for(self._ring_changed.wait(), self.rebalance_interval)
            # Let a burst of changes settle, so a broker joining does not move topics twice.
            await asyncio.sleep(self.rebalance_delay)
            self._ring_changed.clear()
            try:
                await self.rebalance()
            except Exception:
                log.exception("rebalancing failed")

    def _scan_departures(self) -> None:
        """Look for the topics of brokers that left the registry while active (seen dead)."""
        for record in list(self.membership.departed.values()):
            seen = (record.address.name, record.incarnation)
            if seen in self._departures or record.state != ACTIVE or not record.serving:
                continue
            self._departures[seen] = None
            while len(self._departures) > DEPARTURES_KEPT:
                del self._departures[next(iter(self._departures))]
            self._spawn(self._orphans_of(record))

    async def _orphans_of(self, record: BrokerRecord) -> None:
        """Take up a dead broker's topics now: its ownership records last as long as its session.

        Only a broker whose listener refuses connections is dead for sure; one that left the
        registry otherwise (cut off, or gone after a drain) keeps its records until its session
        ends. A dead one's metadata session is ended at once, as its lease would end it later
        (its heartbeats have stopped): its records go in one deletion per shard, and each
        deletion notice orphans a topic, claimed then if absent. Records of a session that
        could not be ended are replaced at the version read, a batch at a time as the scan of
        its owner index goes on. The topics the ring gives to others are kept as orphans, in
        case the ring changes before they adopt them.
        """
        if not await self._refuses(record.address):
            return
        tag = owner_tag(record.address.name, record.incarnation)
        now = time.monotonic()
        found, mine, adoptions = 0, [], []
        sessions: dict[tuple[str, int], bool] = {}  # the dead broker's sessions (shard, id): ended?
        try:
            async for rec in self.meta.range_scan(tag, tag + "\x01", use_index=OWNED_BY):
                topic = unquote(rec.key[len(OWNERS):])
                if topic in self.owned:
                    continue
                found += 1
                if rec.version.session_id is not None:
                    session = (await self.meta.shard_of(rec.key), rec.version.session_id)
                    if session not in sessions:
                        sessions[session] = await self._end_session(record, rec.key, session[1])
                    if sessions[session]:
                        continue  # deleted with its session: the deletion's notice orphans it
                self._orphan_versions[topic] = rec.version.version_id
                if self.draining or self._home_name(topic) != self.local.name:
                    self._orphans.setdefault(topic, now)
                    continue
                mine.append(topic)
                if len(mine) == ADOPTION_BATCH:  # claimed while the scan goes on
                    adoptions.append(spawn(self._adopt(mine), "adoption", self._tasks))
                    mine = []
        except MetadataError as exc:  # its records still go with its session
            log.warning("listing the topics of dead broker %s failed: %s", record.address.name, exc)
        if mine:
            adoptions.append(spawn(self._adopt(mine), "adoption", self._tasks))
        if found:
            log.info("broker %s is dead and owned %d topic(s): adopting this broker's share %s", record.address.name,
                     found, "as its records go with its ended session" if any(sessions.values())
                     else "before its session expires")
        await asyncio.gather(*adoptions, return_exceptions=True)  # failures logged by spawn

    async def _end_session(self, record: BrokerRecord, key: str, sid: int) -> bool:
        """End the dead broker's session that holds ``key`` (one per shard; a survivor that
        comes second finds it ended). False if it could not be: its records wait for its lease."""
        try:
            ended = await self.meta.end_session_of(key, sid)
        except MetadataError as exc:
            log.warning("ending session %d of dead broker %s failed: %s", sid, record.address.name, exc)
            return False
        log.info("broker %s is dead: %s its metadata session %d", record.address.name,
                 "ended" if ended else "another broker ended", sid)
        return True

    async def rebalance(self) -> None:
        """Hand over the topics the ring gives to others; adopt orphans it gives to us."""
        self._scan_departures()
        now = time.monotonic()
        moves = []
        # A topic's home changes only with the ring (its preferred leader is held while it is owned
        # here): against the ring checked last time, only the topics claimed since are looked at (a
        # client sent here may have claimed another's). Hundreds of thousands of topics owned would
        # otherwise cost a hash each, every pass.
        ring, checked_at = self.membership.ring, self._homes_checked[1]
        if ring is not self._homes_checked[0]:
            checked_at = float("-inf")
        self._homes_checked = (ring, now)
        for n, (topic, (_version, claimed_at)) in enumerate(list(self.owned.items()), 1):
            if n % 20_000 == 0:
                await asyncio.sleep(0)  # no long stall of the loop
            target = self._home_name(topic) if claimed_at >= checked_at else None
            if target is not None and target != self.local.name:
                moves.append(self._move(topic, f"moved to {target}"))
            elif now - claimed_at > UNUSED_SECONDS and self.registry is not None \
                    and now - claimed_at > self._unused_after(topic) and not self.registry.in_use(topic) \
                    and topic not in self._claiming:
                moves.append(self.release(topic, "unused"))
        for topic, released in list(self._released.items()):
            if now - released > ORPHAN_SECONDS:  # its deletion was never heard (or failed)
                del self._released[topic]
        adopt = []
        for topic, seen in list(self._orphans.items()):
            if topic in self.owned:
                del self._orphans[topic]
                self._orphan_versions.pop(topic, None)
            elif not self.draining and self._home_name(topic) == self.local.name:
                # However long ago it was orphaned: the adoptions before may have taken longer.
                del self._orphans[topic]
                adopt.append(topic)
            elif now - seen > ORPHAN_SECONDS:
                del self._orphans[topic]
                self._orphan_versions.pop(topic, None)
        if moves or adopt:
            log.info("rebalance: handing over %d topic(s), adopting %d", len(moves), len(adopt))
            batches = [adopt[i:i + ADOPTION_BATCH] for i in range(0, len(adopt), ADOPTION_BATCH)]
            await asyncio.gather(*moves, *(self._adopt(batch) for batch in batches))
        load = {"topics": len(self.owned)}
        if load != self.membership.load:
            with contextlib.suppress(MetadataError):
                await self.membership.publish_load(load)

    def _unused_after(self, topic: str) -> float:
        """Seconds after its claim that an owned topic no client loaded is released. An adopted one
        stays as long as a loaded topic would stay idle (it was its dead owner's, maybe loaded there)."""
        if topic not in self._adopted:
            return UNUSED_SECONDS
        idle = self.registry.idle_seconds if self.registry is not None else 0
        return max(idle, UNUSED_SECONDS) if idle > 0 else float("inf")

    async def _adopt(self, topics: list[str]) -> None:
        """Claim orphaned topics together: one batched write of their ownership records, each put
        if absent or, for a dead owner's record still there, at the version its scan read. A claim
        refused for its version is left to whoever claimed the topic meanwhile (or to the notice of
        the record's deletion); one that failed for want of the metadata plane is made again."""
        async with self._adoption_batches:
            await self._claim_orphans(topics)

    async def _claim_orphans(self, topics: list[str]) -> None:
        versions = [self._orphan_versions.pop(t, EXPECT_ABSENT) for t in topics]
        epoch = self._epoch
        try:
            homes = await self.leader_preferences.brokers(topics)  # reads only Kafka partitions'
        except MetadataError as exc:
            log.warning("adopting %d topic(s) failed: %s", len(topics), exc)
            self._orphaned_again(topics, epoch)
            return
        value, index = self._owner_value(), self._owned_by()
        claims = [(topic, PutOp(owner_key(topic), value, expected_version_id=version, ephemeral=True,
                                secondary_indexes=index))
                  for topic, version, home in zip(topics, versions, homes)
                  if (home or self.membership.ring.owner(topic)) == self.local.name and _persistent(topic)
                  and topic not in self.owned and topic not in self._claiming and topic not in self._releasing]
        if not claims or epoch != self._epoch or not self._registered.is_set():
            return
        try:
            results = await self.meta.put_many([op for _, op in claims])
        except MetadataError as exc:
            log.warning("adopting %d topic(s) failed: %s", len(claims), exc)
            self._orphaned_again([topic for topic, _ in claims], epoch)
            return
        won = [(topic, result) for (topic, _), result in zip(claims, results) if isinstance(result, PutResult)]
        # A claim refused for its version lost to another claim, or met a record deleted since it was
        # read (its deletion's notice orphans the topic again); any other failure is tried again.
        self._orphaned_again([topic for (topic, _), result in zip(claims, results)
                              if isinstance(result, Exception) and not isinstance(result, UnexpectedVersion)], epoch)
        if epoch != self._epoch:  # the session was lost meanwhile: these records are not to be trusted
            for topic, result in won:
                with contextlib.suppress(MetadataError):
                    await self.meta.delete(owner_key(topic), expected_version_id=result.version.version_id)
            return
        now = time.monotonic()
        for topic, result in won:
            self.owned[topic] = (result.version.version_id, now)
            self._adopted[topic] = None
            await self.leader_preferences.hold(topic)  # read just above: no metadata read
        self.adoptions += len(won)
        lost = len(claims) - len(won)
        log.debug("adopted %d topic(s)%s", len(won), f"; {lost} taken by others meanwhile" if lost else "")

    def _orphaned_again(self, topics: list[str], epoch: int) -> None:
        """Claims that failed for want of the metadata plane: adopted at a later pass (unless the
        session was lost meanwhile: then every topic was dropped)."""
        if topics and epoch == self._epoch:
            now = time.monotonic()
            for topic in topics:
                self._orphans.setdefault(topic, now)
            self._ring_changed.set()


def _persistent(topic: str) -> bool:
    """Adopted are persistent topics: the others are served from memory, claimed again on lookup."""
    return topic.startswith("persistent://")


__all__ = ["ADOPTION_BATCH", "ADOPTION_BATCHES", "ORPHAN_SECONDS", "Rebalancing", "UNUSED_SECONDS"]
