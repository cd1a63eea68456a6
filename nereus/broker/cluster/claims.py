"""Claims and releases of topics, and what a broker does when it loses its metadata session.

- *Claim*: the ownership record is put only if absent (or replaced when it is this
  broker's earlier incarnation's), one read-decide-write retried by ``meta.cas``; a claim
  under way when the session is lost is undone.
- *Release*: the record is marked ``releasing`` first (lookups elsewhere then wait for the
  next owner), the topic unloaded, and only then the record deleted.
- *Lost session*: this broker's records may be gone, so it drops every topic without a
  metadata write and registers again as a new incarnation.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from ...meta import EXPECT_ABSENT, UnexpectedVersion, cas
from ...meta.cas import ReadAgain
from ...meta.errors import MetadataError
from ...tasks import spawn
from ...topics.placement import NotOwner
from .membership import ACTIVE
from .owner_lookup import HANDOFF_WAIT, OWNED_BY, OwnerLookup, decode_owner, is_releasing, owner_key, owner_tag

log = logging.getLogger(__name__)

REGISTER_RETRY_MAX = 2.0  # longest pause between attempts to register again after a lost session


class Claims(OwnerLookup):
    """The topics this broker owns (``owned``), taken and given up."""

    registry: object | None
    owned: dict[str, tuple[int, float]]
    handoffs: int
    _adopted: dict[str, None]
    _homes_checked: tuple[object, float]
    _claiming: dict[str, asyncio.Future]
    _releasing: dict[str, asyncio.Future]
    _orphans: dict[str, float]
    _orphan_versions: dict[str, int]
    _released: dict[str, float]
    _moves: asyncio.Semaphore
    _tasks: set[asyncio.Task]
    _recovering: asyncio.Future | None
    _epoch: int
    _registered: asyncio.Event

    @property
    def draining(self) -> bool:
        return self.membership.state != ACTIVE

    async def _claim(self, topic: str, *, force: bool, seen_absent: bool = False) -> None:
        """Own ``topic``. ``seen_absent``: the caller just read no ownership record, so the first
        attempt creates one without reading again (it fails if one came meanwhile, then reads)."""
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
            pending = self._claiming[topic] = asyncio.ensure_future(self._try_claim(topic, force, seen_absent))
            pending.add_done_callback(lambda _f: self._claiming.pop(topic, None))
        await asyncio.shield(pending)

    async def _try_claim(self, topic: str, force: bool, seen_absent: bool = False) -> None:
        key = owner_key(topic)
        epoch = self._epoch
        await self.leader_preferences.load(topic)  # rebalancing keeps it where it is preferred
        value = self._owner_value()

        skip_read = seen_absent  # the first attempt only: later ones follow a failed write

        def session_lost() -> NotOwner:
            return NotOwner(f"{topic}: broker {self.local.name} lost its metadata session while claiming", None)

        async def put_owner() -> None:
            # Retried whenever someone else claimed or released the topic meanwhile.
            nonlocal skip_read
            if epoch != self._epoch:
                raise session_lost()
            rec = None if skip_read else await self.meta.get(key)
            skip_read = False
            if rec is not None:
                name, incarnation = decode_owner(rec.value)
                if name == self.local.name and incarnation == self.membership.incarnation:
                    if epoch != self._epoch:
                        raise ReadAgain  # looked at across a session loss: decided again above
                    self.owned[topic] = (rec.version.version_id, time.monotonic())
                    return
                if name != self.local.name:
                    owner = self.membership.brokers.get(name)
                    if owner is not None and owner.incarnation == incarnation:
                        if is_releasing(rec.value) and await self._gone(key, rec.version.version_id, HANDOFF_WAIT):
                            raise ReadAgain  # handed over just now: claim it
                        raise NotOwner(f"{topic} is served by {name}", owner.address)
                    if await self._dead_incarnation(name, incarnation, True) \
                            and await self._take_from_dead(topic, rec.version.version_id):
                        raise ReadAgain  # its owner is surely dead: claim it now
                    raise NotOwner(f"{topic}: its owner {name} is gone; it moves once that session expires")
                expected = rec.version.version_id  # our earlier incarnation's record
            else:
                if not force:
                    preferred = await self._home(topic)
                    if preferred.name != self.local.name:
                        raise NotOwner(f"{topic} belongs to {preferred.name}", preferred)
                expected = EXPECT_ABSENT
            result = await self.meta.put(key, value, expected_version_id=expected, ephemeral=True,
                                         secondary_indexes=self._owned_by())
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
        if topic in self.owned:  # held until released: rebalancing reads it from memory
            await self.leader_preferences.hold(topic)
            if topic not in self.owned:  # released while its preference was read
                self.leader_preferences.forget(topic)

    def _owner_value(self, *, releasing: bool = False) -> bytes:
        """An ownership record naming this broker's incarnation (``decode_owner``, ``is_releasing``)."""
        value = {"broker": self.local.name, "incarnation": self.membership.incarnation}
        return json.dumps({**value, "releasing": True} if releasing else value).encode()

    def _owned_by(self) -> dict[str, str]:
        return {OWNED_BY: owner_tag(self.local.name, self.membership.incarnation)}

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
                    marked = await self.meta.put(owner_key(topic), self._owner_value(releasing=True),
                                                 expected_version_id=version, ephemeral=True,
                                                 secondary_indexes=self._owned_by())
                    version = marked.version.version_id
            loaded = self.registry.loaded(topic) if self.registry is not None else None
            if loaded is not None:
                await self.registry.unload(loaded, reason)
            if self.registry is not None:
                self.registry.drop_memory_topic(topic)
            self.owned.pop(topic, None)
            self._adopted.pop(topic, None)
            self.leader_preferences.forget(topic)
            if version is not None:
                # Its deletion is heard here too: not a dead owner's record, nothing to adopt.
                self._released[topic] = time.monotonic()
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
                self._homes_checked = (None, 0.0)  # tried again at the next pass

    # -- a lost session ---------------------------------------------------------------------
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
        self._adopted = {}
        self.leader_preferences.drop_held()
        self._orphans.clear()
        self._orphan_versions.clear()
        self._released.clear()
        lost, self._lost = self._lost_future(), None
        lost.set_result(None)
        if self.registry is not None:  # read-only ones too: they reload once this broker is back
            self.registry.abandon_all(reason)

    def _spawn(self, coro) -> None:
        task = spawn(coro, "ownership")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


__all__ = ["Claims"]
