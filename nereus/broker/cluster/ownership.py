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
- *Failover*: a dead broker's records vanish with its session. Each broker hears the
  deletions and adopts the topics its ring now gives it: it claims them and takes
  their append sessions at once, which fences a zombie that wakes up later.
- *Lost session*: this broker's records may be gone, so it drops every topic,
  deletes what is left of its records and registers again as a new incarnation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from urllib.parse import quote, unquote

from ...ledger.naming import InvalidTopicName, TopicName
from ...meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion, cas
from ...meta.cas import ReadAgain
from ...meta.api import Notification, NotificationType
from ...meta.errors import MetadataError
from ...tasks import spawn, unless, wait_for
from ...topics.placement import BrokerAddress, NotOwner, Placement
from .leader_preference import LeaderPreferences
from .membership import ACTIVE, Membership

log = logging.getLogger(__name__)

OWNERS = "/nereus/cluster/owners/"
ORPHAN_SECONDS = 60.0  # how long a topic whose owner vanished is considered for adoption
UNUSED_SECONDS = 60.0  # a claimed topic no client loaded is released after this long
HANDOFF_WAIT = 5.0  # how long a lookup waits for a topic being handed over to be released
PROBE_TIMEOUT = 1.0  # an owner's listener that does not accept within this is unreachable
PROBE_CACHE_OK, PROBE_CACHE_FAILED = 1.0, 0.2  # seconds a probe's answer is reused
REGISTER_RETRY_MAX = 2.0  # longest pause between attempts to register again after a lost session


class OwnerUnreachable(NotOwner):
    """The topic's registered owner refuses connections (it died; its session has not expired yet)."""


def owner_key(topic: str) -> str:
    return OWNERS + quote(topic, safe="")


class ClusterPlacement(Placement):
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
        self._probes: dict[str, tuple[bool, float]] = {}  # broker name -> (answers, when probed)
        self._moves = asyncio.Semaphore(max_concurrent_moves)
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
        registry.on_load(lambda topic: topic.on_unload(lambda _reason, name=str(topic.name): self._unloaded(name)))

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

    @property
    def draining(self) -> bool:
        return self.membership.state != ACTIVE

    # -- the Placement questions ------------------------------------------------------------
    def brokers(self) -> list[BrokerAddress]:
        return self.membership.active() or [self.local]

    def preferred(self, key: str, zone: str | None = None) -> BrokerAddress:
        ring = self.membership.ring
        name = ring.preferred(key, zone)
        return ring.value(name) if name is not None else self.local

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
        await self._claim(topic, force=True)
        return self.local, True

    async def claim(self, topic: str) -> None:
        await self._claim(topic, force=False)

    async def _home(self, topic: str) -> BrokerAddress:
        """The broker that should own ``topic``: its active preferred leader, else the ring's."""
        await self.leader_preferences.load(topic)
        name = self.leader_preferences.broker(topic)
        record = self.membership.brokers.get(name) if name is not None else None
        return record.address if record is not None else self.preferred(topic)

    def _home_name(self, topic: str) -> str | None:
        """``_home``'s name from what is cached (rebalancing decides without metadata reads)."""
        return self.leader_preferences.broker(topic) or self.membership.ring.owner(topic)

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

    def _lost_future(self) -> asyncio.Future:
        if self._lost is None:
            self._lost = asyncio.get_running_loop().create_future()
        return self._lost

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

    # -- claims ---------------------------------------------------------------------------
    async def _current_owner(self, topic: str, *, wait: bool = True, probe: bool = False) -> BrokerAddress | None:
        """The live owner named by the topic's record (None when there is none or it is dead).

        With ``probe``, an owner whose listener refuses connections (killed, its session
        not expired yet) is waited out like a dead one: a client sent there would only
        fail and back off further with every retry.
        """
        rec = await self.meta.get(owner_key(topic))
        if rec is None:
            return None
        name, incarnation = _decode(rec.value)
        if name == self.local.name:
            return None  # a record of an earlier incarnation: ours to replace
        record = self.membership.brokers.get(name)
        if record is not None and record.incarnation == incarnation:
            if wait and _releasing(rec.value):  # being handed over: its next owner is moments away
                if await self._gone(owner_key(topic), rec.version.version_id, HANDOFF_WAIT):
                    return None
                return record.address
            if not probe or await self._answers(record.address):
                return record.address
            if not wait:
                raise OwnerUnreachable(f"{topic}: its owner {name} does not answer", None)
            if await self._gone(owner_key(topic), rec.version.version_id):
                await self._forgotten(name)
                return None
            return record.address  # alive after all, or unreachable from here only: let the client try
        # Its owner is gone and its record goes when that session expires: hold the
        # answer until then rather than send the client into its reconnect backoff.
        if wait and await self._gone(owner_key(topic), rec.version.version_id):
            return None
        raise NotOwner(f"{topic}: its owner {name} is gone; it moves once that broker's session expires")

    async def _answers(self, address: BrokerAddress) -> bool:
        """Does ``address``'s Pulsar listener accept connections? (cached briefly)"""
        now = time.monotonic()
        cached = self._probes.get(address.name)
        if cached is not None and now - cached[1] < (PROBE_CACHE_OK if cached[0] else PROBE_CACHE_FAILED):
            return cached[0]
        host, _, port = address.pulsar_url.rpartition("://")[2].rpartition(":")
        try:
            _, writer = await wait_for(asyncio.open_connection(host, int(port)), PROBE_TIMEOUT)
            writer.close()
            ok = True
        except (OSError, ValueError, asyncio.TimeoutError):
            ok = False
        self._probes[address.name] = (ok, time.monotonic())
        return ok

    async def _forgotten(self, name: str) -> None:
        """Wait (briefly) until the ring no longer has ``name``, so it is not named again."""
        deadline = time.monotonic() + 3.0
        while name in self.membership.brokers and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def _gone(self, key: str, version: int, timeout: float | None = None) -> bool:
        """Wait (at most ``dead_owner_wait``) until the record ``key`` at ``version`` is deleted or replaced."""
        deadline = time.monotonic() + (self.dead_owner_wait if timeout is None else timeout)
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            rec = await self.meta.get(key, include_value=False)
            if rec is None or rec.version.version_id != version:
                return True
        return False

    async def _claim(self, topic: str, *, force: bool) -> None:
        releasing = self._releasing.get(topic)
        if releasing is not None:
            await asyncio.shield(releasing)
            force = False  # released on purpose: go where the ring says
        if topic in self.owned:
            return
        if self.draining:
            raise NotOwner(f"{topic}: broker {self.local.name} is draining", None)
        if not self._registered.is_set():
            raise NotOwner(f"{topic}: broker {self.local.name} is registering again", None)
        pending = self._claiming.get(topic)
        if pending is None:
            pending = self._claiming[topic] = asyncio.ensure_future(self._try_claim(topic, force))
            pending.add_done_callback(lambda _f: self._claiming.pop(topic, None))
        await asyncio.shield(pending)

    async def _try_claim(self, topic: str, force: bool) -> None:
        key = owner_key(topic)
        epoch = self._epoch
        await self.leader_preferences.load(topic)  # rebalancing keeps it where it is preferred
        value = json.dumps({"broker": self.local.name, "incarnation": self.membership.incarnation}).encode()

        def session_lost() -> NotOwner:
            return NotOwner(f"{topic}: broker {self.local.name} lost its metadata session while claiming", None)

        async def put_owner() -> None:
            # Retried whenever someone else claimed or released the topic meanwhile.
            if epoch != self._epoch:
                raise session_lost()
            rec = await self.meta.get(key)
            if rec is not None:
                name, incarnation = _decode(rec.value)
                if name == self.local.name and incarnation == self.membership.incarnation:
                    if epoch != self._epoch:
                        raise ReadAgain  # looked at across a session loss: decided again above
                    self.owned[topic] = (rec.version.version_id, time.monotonic())
                    return
                if name != self.local.name:
                    owner = self.membership.brokers.get(name)
                    if owner is not None and owner.incarnation == incarnation:
                        if _releasing(rec.value) and await self._gone(key, rec.version.version_id, HANDOFF_WAIT):
                            raise ReadAgain  # handed over just now: claim it
                        raise NotOwner(f"{topic} is served by {name}", owner.address)
                    raise NotOwner(f"{topic}: its owner {name} is gone; it moves once that session expires")
                expected = rec.version.version_id  # our earlier incarnation's record
            else:
                if not force:
                    preferred = await self._home(topic)
                    if preferred.name != self.local.name:
                        raise NotOwner(f"{topic} belongs to {preferred.name}", preferred)
                expected = EXPECT_ABSENT
            result = await self.meta.put(key, value, expected_version_id=expected, ephemeral=True)
            if epoch != self._epoch:
                # The session was lost while the put was on its way: the record may now live under
                # the new session with the old incarnation in it, which every other broker reads as
                # "owner gone" for as long as this broker lives. Take it back.
                with contextlib.suppress(UnexpectedVersion, MetadataError):
                    await self.meta.delete(key, expected_version_id=result.version.version_id)
                raise session_lost()
            self.owned[topic] = (result.version.version_id, time.monotonic())
            log.debug("%s: owned by this broker now", topic)

        await cas.retry(put_owner, exhausted=lambda: NotOwner(f"{topic}: its ownership record keeps changing", None))

    # -- releases -------------------------------------------------------------------------
    def _unloaded(self, topic: str) -> None:
        """A loaded topic unloaded (idle, fenced, deleted): its ownership goes with it."""
        if topic in self.owned and topic not in self._releasing:
            self._spawn(self.release(topic, "unloaded"))

    async def release(self, topic: str, reason: str) -> None:
        """Unload ``topic`` (if loaded) and delete its ownership record."""
        pending = self._releasing.get(topic)
        if pending is not None:
            await asyncio.shield(pending)
            return
        done = self._releasing[topic] = asyncio.get_running_loop().create_future()
        try:
            claimed = self.owned.get(topic)
            version = claimed[0] if claimed is not None else None
            if version is not None:
                # Marked first: lookups anywhere now wait for the next owner rather than
                # send the clients we are about to close straight back here.
                with contextlib.suppress(UnexpectedVersion, MetadataError):
                    marked = await self.meta.put(owner_key(topic), json.dumps(
                        {"broker": self.local.name, "incarnation": self.membership.incarnation,
                         "releasing": True}).encode(), expected_version_id=version, ephemeral=True)
                    version = marked.version.version_id
            loaded = self.registry.loaded(topic) if self.registry is not None else None
            if loaded is not None:
                await self.registry.unload(loaded, reason)
            if self.registry is not None:
                self.registry.drop_memory_topic(topic)
            self.owned.pop(topic, None)
            self.leader_preferences.forget(topic)
            if version is not None:
                with contextlib.suppress(UnexpectedVersion, MetadataError):
                    await self.meta.delete(owner_key(topic), expected_version_id=version)
        finally:
            del self._releasing[topic]
            done.set_result(None)

    async def release_all(self, reason: str) -> None:
        await asyncio.gather(*(self._move(topic, reason) for topic in list(self.owned)))

    async def _move(self, topic: str, reason: str) -> None:
        async with self._moves:
            try:
                await self.release(topic, reason)
                self.handoffs += 1
            except Exception:
                log.exception("%s: handing over failed", topic)

    async def session_lost(self) -> None:
        """Our ephemeral records may be gone: drop every topic and register anew.

        A client holds one session per shard and may report several lost at once:
        they are handled by one recovery (a second registration racing the first
        could leave claims under an identity nobody recognises).
        """
        if self._recovering is not None and not self._recovering.done():
            await asyncio.shield(self._recovering)
            return
        self._recovering = asyncio.ensure_future(self._recover())
        await asyncio.shield(self._recovering)

    async def _recover(self) -> None:
        log.warning("metadata session lost: dropping %d topic(s) and registering again", len(self.owned))
        self._registered.clear()  # no claims until registered again
        self._epoch += 1  # claims under way are undone (_try_claim)
        self._abandon_all("metadata session lost")
        delay = 0.1
        while True:  # as long as the metadata service cannot be reached: this broker serves nothing
            try:
                await self.membership.register(new_incarnation=True)
                await self.membership.refresh()
                break
            except MetadataError as exc:
                log.warning("registering again failed (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, REGISTER_RETRY_MAX)
        self._registered.set()
        log.info("registered again after the metadata session was lost")

    def _abandon_all(self, reason: str) -> None:
        """Stop serving every topic now, without a metadata write first.

        The ownership records went with the session and another broker adopts the
        topics within the session timeout, so this broker must not hold on to their
        clients while it cannot reach the metadata plane: the unloads close them at
        once (Pulsar: the clients look the topics up again; Kafka: NOT_LEADER_OR_FOLLOWER)
        and finish their own bookkeeping (flushes that now fail as fenced) in the
        background, whenever the metadata plane answers again.
        """
        self.handoffs += len(self.owned)
        self.owned = {}
        self._orphans.clear()
        lost, self._lost = self._lost_future(), None
        lost.set_result(None)
        if self.registry is not None:  # read-only ones too: they reload once this broker is back
            self.registry.abandon_all(reason)

    # -- rebalancing and failover -------------------------------------------------------------
    def _owner_note(self, note: Notification) -> None:
        if note.type != NotificationType.KEY_DELETED:
            return
        topic = unquote(note.key[len(OWNERS):])
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

    async def rebalance(self) -> None:
        """Hand over the topics the ring gives to others; adopt orphans it gives to us."""
        now = time.monotonic()
        moves = []
        for topic, (_version, claimed_at) in list(self.owned.items()):
            target = self._home_name(topic)
            if target is not None and target != self.local.name:
                moves.append(self._move(topic, f"moved to {target}"))
            elif self.registry is not None and not self.registry.in_use(topic) \
                    and now - claimed_at > UNUSED_SECONDS and topic not in self._claiming:
                moves.append(self.release(topic, "unused"))
        adopt = []
        for topic, seen in list(self._orphans.items()):
            if now - seen > ORPHAN_SECONDS or topic in self.owned:
                del self._orphans[topic]
            elif not self.draining and self._home_name(topic) == self.local.name:
                del self._orphans[topic]
                adopt.append(self._adopt(topic))
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
        async with self._moves:
            try:
                await self._claim(topic, force=False)
                loaded = await self.registry.get(name)
                await loaded.ensure_writer()
                self.adoptions += 1
            except NotOwner as exc:
                log.debug("not adopting %s: %s", topic, exc)
            except Exception:
                log.exception("adopting %s failed", topic)

    def _spawn(self, coro) -> None:
        task = spawn(coro, "ownership")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _decode(raw: bytes) -> tuple[str, str]:
    try:
        value = json.loads(raw)
        return str(value["broker"]), str(value["incarnation"])
    except (ValueError, KeyError, TypeError):
        return "", ""


def _releasing(raw: bytes) -> bool:
    try:
        return bool(json.loads(raw).get("releasing"))
    except (ValueError, AttributeError):
        return False


__all__ = ["ClusterPlacement", "OWNERS", "owner_key"]
