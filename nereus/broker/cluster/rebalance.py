"""Rebalancing and failover: topics follow the ring.

When the ring moves a topic elsewhere (a broker joined, or this one drains), its owner
hands it over; a claimed topic no client loaded is released after a while. When an owner
dies its records vanish with its session: each broker hears the deletions and adopts the
topics its ring now gives it, claiming them and taking their append sessions at once,
which fences a zombie that wakes up later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from urllib.parse import unquote

from ...ledger.naming import InvalidTopicName, TopicName
from ...meta.api import Notification, NotificationType
from ...meta.errors import MetadataError
from ...tasks import wait_for
from ...topics.placement import NotOwner
from .claims import Claims
from .membership import ACTIVE, BrokerRecord
from .owner_lookup import OWNED_BY, OWNERS, owner_tag

log = logging.getLogger(__name__)

ORPHAN_SECONDS = 60.0  # how long a topic whose owner vanished is kept in case the ring gives it to us
UNUSED_SECONDS = 60.0  # a claimed topic no client loaded is released after this long
DEPARTURES_KEPT = 64  # departed incarnations remembered as looked at


class Rebalancing(Claims):
    """The rebalancing loop (``start`` to ``stop``) and the adoption of orphaned topics."""

    rebalance_delay: float
    rebalance_interval: float
    adoptions: int
    _ring_changed: asyncio.Event
    _adoptions: asyncio.Semaphore
    _departures: dict[tuple[str, str], None]

    def _owner_note(self, note: Notification) -> None:
        self._record_changed(note.key)
        if note.type != NotificationType.KEY_DELETED:
            return
        topic = unquote(note.key[len(OWNERS):])
        if self._released.pop(topic, None) is not None:
            return  # released here (idle, unused, moved): adopting it would load it again
        if topic not in self.owned and topic not in self._releasing:
            self._orphans[topic] = time.monotonic()
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
        ends. The claims that follow delete each record at the version read (``_claim``).
        """
        if not await self._refuses(record.address):
            return
        tag = owner_tag(record.address.name, record.incarnation)
        now = time.monotonic()
        found = 0
        try:
            async for rec in self.meta.range_scan(tag, tag + "\x01", use_index=OWNED_BY):
                topic = unquote(rec.key[len(OWNERS):])
                if topic not in self.owned:
                    self._orphans.setdefault(topic, now)
                    found += 1
        except MetadataError as exc:  # its records still go with its session
            log.warning("listing the topics of dead broker %s failed: %s", record.address.name, exc)
        if found:
            log.info("broker %s is dead and owned %d topic(s): adopting this broker's share before its session "
                     "expires", record.address.name, found)
            self._ring_changed.set()

    async def rebalance(self) -> None:
        """Hand over the topics the ring gives to others; adopt orphans it gives to us."""
        self._scan_departures()
        now = time.monotonic()
        moves = []
        for topic, (_version, claimed_at) in list(self.owned.items()):
            target = self._home_name(topic)
            if target is not None and target != self.local.name:
                moves.append(self._move(topic, f"moved to {target}"))
            elif self.registry is not None and not self.registry.in_use(topic) \
                    and now - claimed_at > UNUSED_SECONDS and topic not in self._claiming:
                moves.append(self.release(topic, "unused"))
        for topic, released in list(self._released.items()):
            if now - released > ORPHAN_SECONDS:  # its deletion was never heard (or failed)
                del self._released[topic]
        adopt = []
        for topic, seen in list(self._orphans.items()):
            if topic in self.owned:
                del self._orphans[topic]
            elif not self.draining and self._home_name(topic) == self.local.name:
                # However long ago it was orphaned: the adoptions before may have taken longer.
                del self._orphans[topic]
                adopt.append(self._adopt(topic))
            elif now - seen > ORPHAN_SECONDS:
                del self._orphans[topic]
        if moves or adopt:
            log.info("rebalance: handing over %d topic(s), adopting %d", len(moves), len(adopt))
            await asyncio.gather(*moves, *adopt)
        load = {"topics": len(self.owned)}
        if load != self.membership.load:
            with contextlib.suppress(MetadataError):
                await self.membership.publish_load(load)

    async def _adopt(self, topic: str) -> None:
        """Take a topic whose owner vanished: claim it and fence its stream now."""
        try:
            name = TopicName.parse(topic)
        except InvalidTopicName:
            return
        if name.domain != "persistent":
            return  # served from memory: nothing to fence, its clients claim it again on lookup
        async with self._adoptions:
            try:
                await self._claim(topic, force=False)
                loaded = await self.registry.get(name)
                await loaded.ensure_writer()
                self.adoptions += 1
            except NotOwner as exc:
                log.debug("not adopting %s: %s", topic, exc)
            except Exception:
                log.exception("adopting %s failed", topic)


__all__ = ["ORPHAN_SECONDS", "Rebalancing", "UNUSED_SECONDS"]
