"""Topic ownership over the ring: claims, lookups, handoffs and failover.

A topic's owner serves its writes and dispatches its subscriptions. It holds an
ephemeral record ``/nereus/cluster/owners/{topic}`` (broker name and incarnation)
put only if absent, so there is at most one owner at a time, and any broker finds
it with one read. Whoever owns a topic also takes its stream's append session
(fencing token) before its first write: the record routes clients, the session
fences writers.

- *Claim*: a broker takes a topic that nobody owns when its ring says so (or the
  topic's preferred leader is this broker: ``leader_preference``), or when a client
  was sent to it authoritatively (this ends a ping-pong of brokers whose ring views
  differ for a moment).
- *Handoff*: when the ring moves a topic elsewhere (a broker joined, or this one
  drains), the owner unloads it (flush, commit, close clients so they look it up
  again, release the append session) and only then deletes its record. Only
  metadata changes; no object is copied.
- *Failover*: a dead broker's records vanish with its session (or are replaced at once
  when its listener refuses connections). Each broker adopts the topics its ring now
  gives it, claiming their records in batches; a topic is loaded, and its stream's
  append session taken (which fences the dead owner, or a zombie that wakes up), when
  a client first asks for it.
- *Lost session*: this broker's records may be gone, so it drops every topic,
  deletes what is left of its records and registers again as a new incarnation.

The parts: ``owner_lookup.py`` (records read, owners' liveness), ``claims.py`` (claims,
releases, a lost session), ``rebalance.py`` (handoffs and adoption); this module answers
the ``Placement`` questions over them.
"""

from __future__ import annotations

import asyncio
import contextlib

from ...meta import MetadataStore
from ...tasks import gather_bounded, unless
from ...topics.placement import BrokerAddress, NotOwner, or_none
from .leader_preference import LeaderPreferences
from .membership import Membership
from .owner_lookup import OWNERS, OwnerUnreachable, decode_owner, owner_key
from .rebalance import ADOPTION_BATCHES, Rebalancing


class ClusterPlacement(Rebalancing):
    """The placement answers of one broker of a cluster."""

    def __init__(self, meta: MetadataStore, membership: Membership, *, rebalance_delay: float = 0.5,
                 rebalance_interval: float = 5.0, max_concurrent_moves: int = 16,
                 dead_owner_wait: float = 12.0) -> None:
        super().__init__(membership.address)
        self.meta = meta
        self.membership = membership
        self.registry = None  # bound by ``bind``
        self.rebalance_delay = rebalance_delay
        self.rebalance_interval = rebalance_interval
        self.dead_owner_wait = dead_owner_wait
        self.owned: dict[str, tuple[int, float]] = {}  # topic -> (record version, claimed at)
        self._claiming: dict[str, asyncio.Future] = {}
        self._releasing: dict[str, asyncio.Future] = {}
        self._orphans: dict[str, float] = {}
        self._released: dict[str, float] = {}  # topics whose record this broker deleted, until that is heard
        self._probes: dict[str, tuple[bool, float]] = {}  # broker name -> (answers, when probed)
        self._record_waiters = {}
        self._moves = asyncio.Semaphore(max_concurrent_moves)
        self._adopted: dict[str, None] = {}  # owned topics taken from a dead owner and not released since
        self._departures: dict[tuple[str, str], None] = {}  # (broker, incarnation) whose topics were looked for
        self._orphan_versions: dict[str, int] = {}
        self._adoption_batches = asyncio.Semaphore(ADOPTION_BATCHES)
        self._homes_checked: tuple[object, float] = (None, 0.0)
        self._ring_changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._recovering: asyncio.Future | None = None
        self._epoch = 0  # bumped by every session loss
        self._lost: asyncio.Future | None = None  # done once the current session is lost (_lost_future)
        self._registered = asyncio.Event()
        self._registered.set()
        self.handoffs = 0
        self.adoptions = 0
        self.leader_preferences = LeaderPreferences(meta, membership)
        membership.on_change(self._ring_changed.set)
        membership.on_note(OWNERS, self._owner_note)

    # -- wiring ---------------------------------------------------------------------------
    def bind(self, registry) -> None:
        """Serve for ``registry``: unloads release ownership; handoffs unload."""
        self.registry = registry
        registry.on_unloading(self._unloaded)

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._rebalance_loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- the Placement questions ------------------------------------------------------------
    def brokers(self) -> list[BrokerAddress]:
        return self.membership.active() or [self.local]

    def owns(self, topic: str) -> bool:
        return topic in self.owned

    async def owner(self, topic: str) -> BrokerAddress:
        if topic in self.owned:
            return self.local
        self.check_serving(topic)
        try:
            current = await self._current_owner(topic, wait=False, probe=True)
        except OwnerUnreachable:
            raise  # killed, its session not expired yet: nobody to name for now
        except NotOwner:  # its owner died: name the broker that takes it once the record expires
            current = None
        return current if current is not None else await self._home(topic)

    async def owners(self, topics: list[str]) -> list[BrokerAddress | None]:
        """``owner`` of each topic: the ownership records read together, the live owners they name
        answered from them, the topics nobody holds from their preferences (read together) and
        the ring; a record that needs more (ours of an earlier incarnation, an owner gone or not
        answering) takes the way of ``owner``, one topic at a time."""
        found: list[BrokerAddress | None] = [self.local if t in self.owned else None for t in topics]
        rest = [i for i, address in enumerate(found) if address is None]
        if not rest:
            return found
        # Without a metadata session ``owner`` answers at once (NotOwner, naming no one): no reads.
        records = await self.meta.get_many([owner_key(topics[i]) for i in rest]) \
            if self._registered.is_set() else [None] * len(rest)
        slow, unowned = [], []
        for i, rec in zip(rest, records):
            if rec is None:
                if self._registered.is_set():
                    unowned.append(i)
                else:
                    slow.append(i)
                continue
            name, incarnation = decode_owner(rec.value)
            record = self.membership.brokers.get(name) if name != self.local.name else None
            if record is not None and record.incarnation == incarnation and await self._answers(record.address):
                found[i] = record.address
            else:
                slow.append(i)
        if unowned:  # nobody holds them: named as ``_home`` names them, the preferences read together
            preferred = await self.leader_preferences.brokers([topics[i] for i in unowned])
            for i, name in zip(unowned, preferred):
                found[i] = self._home_of(topics[i], name)
        answers = await gather_bounded(lambda i: or_none(self.owner(topics[i])), slow)
        for i, address in zip(slow, answers):
            found[i] = address
        return found

    async def lookup(self, topic: str, *, authoritative: bool = False) -> tuple[BrokerAddress, bool]:
        releasing = self._releasing.get(topic)
        if releasing is not None:  # handing it over: answer with where it goes
            await asyncio.shield(releasing)
        if topic in self.owned:
            return self.local, True
        self.check_serving(topic)
        current = await self._current_owner(topic, probe=True)
        if current is not None:
            return current, True
        preferred = await self._home(topic)
        if preferred.name != self.local.name and not authoritative:
            return preferred, False
        # No live owner: its record is absent (or was deleted just now), unless it names an
        # earlier incarnation of this broker (then the create fails and the claim reads it).
        await self._claim(topic, force=True, seen_absent=True)
        return self.local, True

    async def claim(self, topic: str) -> None:
        await self._claim(topic, force=False)

    async def while_serving(self, topic: str, awaitable):
        """``awaitable``'s result, or NotOwner as soon as this broker loses its metadata session (a
        request that waits on metadata must not hold its client for as long as a cut lasts)."""
        self.check_serving(topic)
        work = asyncio.ensure_future(awaitable)
        done, result = await unless(work, self._lost_future())
        if done:
            return result
        work.cancel()  # its answer is not wanted: the client is sent on from here
        raise NotOwner(f"{topic}: broker {self.local.name} lost its metadata session", None)

    def check_serving(self, topic: str) -> None:
        """While this broker has no metadata session, it answers at once and names the broker its
        ring gives the topic to without it (a lookup must not wait on metadata it cannot reach)."""
        if self._registered.is_set():
            return
        hint = None
        for name in self.membership.ring.walk(topic):
            if name != self.local.name:
                hint = self.membership.ring.value(name)
                break
        raise NotOwner(f"{topic}: broker {self.local.name} lost its metadata session", hint)


__all__ = ["ClusterPlacement", "OWNERS", "OwnerUnreachable", "owner_key"]
