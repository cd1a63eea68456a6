"""Where a topic's owner is: its ownership record read, the owner's liveness, the ring's choice.

The record ``/nereus/cluster/owners/{topic}`` (broker name and incarnation; ``releasing``
while its owner hands it over) is ephemeral: it vanishes with its owner's metadata
session. An owner seen dead does not keep its topics until then: one whose listener
refuses connections once it announced it serves (nothing listens on its port: the process
died; a stalled one still accepts) is removed from the registry and its record deleted,
and so is the record of
an incarnation a newer one of the same broker replaced (it could bind the ports the name
stands for). Storage fencing, not this judgement, keeps a wrongly judged owner from
writing. An owner that is gone from the registry or cannot be reached otherwise (a
timeout proves nothing) is waited out (up to ``dead_owner_wait``) rather than named to
a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from urllib.parse import quote

from ...meta import MetadataStore, UnexpectedVersion
from ...tasks import wait_for
from ...topics.placement import BrokerAddress, NotOwner, Placement
from .leader_preference import LeaderPreferences
from .membership import BrokerRecord, Membership

OWNERS = "/nereus/cluster/owners/"
HANDOFF_WAIT = 5.0  # how long a lookup waits for a topic being handed over to be released
PROBE_TIMEOUT = 1.0  # an owner's listener that does not accept within this is unreachable
PROBE_CACHE_OK, PROBE_CACHE_FAILED = 1.0, 0.2  # seconds a probe's answer is reused
GONE_RECHECK = 0.5  # seconds between reads of a record waited for, if no notification comes


class OwnerUnreachable(NotOwner):
    """The topic's registered owner refuses connections (it died; its session has not expired yet)."""


#: The secondary index of ownership records by owner (``owner_tag``): what a dead broker owned.
OWNED_BY = "owned-by"


def owner_key(topic: str) -> str:
    return OWNERS + quote(topic, safe="")


def owner_tag(broker: str, incarnation: str) -> str:
    """The ``OWNED_BY`` key of the records of one incarnation of a broker."""
    return f"{quote(broker, safe='')}@{incarnation}"


class OwnerLookup(Placement):
    """Reads of ownership records and of the ring (the lowest part of ``ClusterPlacement``)."""

    meta: MetadataStore
    membership: Membership
    leader_preferences: LeaderPreferences
    dead_owner_wait: float
    _probes: dict[str, tuple[bool, float]]
    _lost: asyncio.Future | None
    _record_waiters: dict[str, set[asyncio.Future]]  # ownership record key -> lookups waiting for its change

    def preferred(self, key: str, zone: str | None = None) -> BrokerAddress:
        ring = self.membership.ring
        name = ring.preferred(key, zone)
        return ring.value(name) if name is not None else self.local

    async def _home(self, topic: str) -> BrokerAddress:
        """The broker that should own ``topic``: its active preferred leader, else the ring's."""
        await self.leader_preferences.load(topic)
        return self._home_of(topic, self.leader_preferences.broker(topic))

    def _home_of(self, topic: str, preferred_broker: str | None) -> BrokerAddress:
        """The preferred broker's address if it is registered, else the ring's broker for ``topic``;
        passing over a broker that refused connections a moment ago (dead, its registration not
        yet gone from this broker's view)."""
        record = self.membership.brokers.get(preferred_broker) if preferred_broker is not None else None
        if record is not None and not self._refused_lately(record.address.name):
            return record.address
        home = self.preferred(topic)
        if not self._refused_lately(home.name):
            return home
        ring = self.membership.ring
        for name in ring.walk(topic):
            if not self._refused_lately(name):
                return ring.value(name)
        return home

    def _refused_lately(self, name: str) -> bool:
        probe = self._probes.get(name)
        return probe is not None and not probe[0] and time.monotonic() - probe[1] < PROBE_CACHE_FAILED

    def _home_name(self, topic: str) -> str | None:
        """``_home``'s name from what is cached (rebalancing decides without metadata reads)."""
        return self.leader_preferences.broker(topic) or self.membership.ring.owner(topic)

    def _lost_future(self) -> asyncio.Future:
        if self._lost is None:
            self._lost = asyncio.get_running_loop().create_future()
        return self._lost

    async def _current_owner(self, topic: str, *, wait: bool = True, probe: bool = False) -> BrokerAddress | None:
        """The live owner named by the topic's record (None when there is none or it is dead).

        With ``probe``, an owner whose listener does not answer is not named: one that
        refuses connections is dead and its record goes now; one that times out is
        waited out like a dead one (a client sent there would only fail and back off).
        """
        for _ in range(3):  # again after taking a dead owner's record raced with another change
            rec = await self.meta.get(owner_key(topic))
            if rec is None:
                return None
            name, incarnation = decode_owner(rec.value)
            if name == self.local.name:
                return None  # a record of an earlier incarnation: ours to replace
            record = self.membership.brokers.get(name)
            if record is not None and record.incarnation == incarnation:
                if wait and is_releasing(rec.value):  # being handed over: its next owner is moments away
                    if await self._gone(owner_key(topic), rec.version.version_id, HANDOFF_WAIT):
                        return None
                    return record.address
                if not probe or await self._answers(record.address):
                    return record.address
                if record.serving and await self._refuses(record.address):
                    await self.membership.forget(record)
                    if await self._take_from_dead(topic, rec.version.version_id):
                        return None
                    continue
                if not wait:
                    raise OwnerUnreachable(f"{topic}: its owner {name} does not answer", None)
                if await self._gone(owner_key(topic), rec.version.version_id):
                    await self._forgotten(name)
                    return None
                return record.address  # alive after all, or unreachable from here only: let the client try
            if await self._dead_incarnation(name, incarnation, probe):
                if await self._take_from_dead(topic, rec.version.version_id):
                    return None
                continue
            # Its owner is gone and its record goes when that session expires: hold the
            # answer until then rather than send the client into its reconnect backoff.
            if wait and await self._gone(owner_key(topic), rec.version.version_id):
                return None
            raise NotOwner(f"{topic}: its owner {name} is gone; it moves once that broker's session expires")
        raise NotOwner(f"{topic}: its ownership record keeps changing", None)

    async def _dead_incarnation(self, name: str, incarnation: str, probe: bool) -> bool:
        """Is the owner ``name``/``incarnation``, not (or no longer) registered, surely dead?"""
        record = self.membership.brokers.get(name)
        if record is not None:
            return True  # a newer incarnation registered: it could bind the old one's ports
        departed: BrokerRecord | None = self.membership.departed.get(name)
        return (probe and departed is not None and departed.incarnation == incarnation and departed.serving
                and await self._refuses(departed.address))

    async def _take_from_dead(self, topic: str, version: int) -> bool:
        """Delete a dead owner's record of ``topic`` (False: it changed meanwhile)."""
        try:
            await self.meta.delete(owner_key(topic), expected_version_id=version)
        except UnexpectedVersion:
            return False
        return True

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

    async def _refuses(self, address: BrokerAddress) -> bool:
        """Does ``address``'s Pulsar listener refuse connections now (asked afresh)? Only a
        refusal counts: nothing listens there. A timeout may be a slow or cut-off broker."""
        host, _, port = address.pulsar_url.rpartition("://")[2].rpartition(":")
        try:
            _, writer = await wait_for(asyncio.open_connection(host, int(port)), PROBE_TIMEOUT)
        except ConnectionRefusedError:
            return True
        except (OSError, ValueError, asyncio.TimeoutError):
            return False
        writer.close()
        self._probes[address.name] = (True, time.monotonic())
        return False

    async def _forgotten(self, name: str) -> None:
        """Wait (briefly) until the ring no longer has ``name``, so it is not named again."""
        deadline = time.monotonic() + 3.0
        while name in self.membership.brokers and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def _gone(self, key: str, version: int, timeout: float | None = None) -> bool:
        """Wait (at most ``dead_owner_wait``) until the record ``key`` at ``version`` is deleted or replaced.

        Woken by the record's change notification (``_record_changed``), read again only then or
        every ``GONE_RECHECK`` seconds (in case notifications are down): thousands of lookups held
        after a broker died must not poll the metadata plane."""
        deadline = time.monotonic() + (self.dead_owner_wait if timeout is None else timeout)
        loop = asyncio.get_running_loop()
        while True:
            changed = loop.create_future()
            waiting = self._record_waiters.setdefault(key, set())
            waiting.add(changed)  # before the read: a change heard after it is not missed
            try:
                rec = await self.meta.get(key, include_value=False)
                if rec is None or rec.version.version_id != version:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                with contextlib.suppress(asyncio.TimeoutError):
                    await wait_for(changed, min(left, GONE_RECHECK))
            finally:
                waiting.discard(changed)
                if not waiting and self._record_waiters.get(key) is waiting:
                    del self._record_waiters[key]

    def _record_changed(self, key: str) -> None:
        """An ownership record changed (a notification): wake whoever waits for it to go."""
        for changed in self._record_waiters.get(key, ()):
            if not changed.done():
                changed.set_result(None)


def decode_owner(raw: bytes) -> tuple[str, str]:
    """(broker name, incarnation) of an ownership record; empty strings if it is unreadable."""
    try:
        value = json.loads(raw)
        return str(value["broker"]), str(value["incarnation"])
    except (ValueError, KeyError, TypeError):
        return "", ""


def is_releasing(raw: bytes) -> bool:
    """Is the record's owner handing the topic over?"""
    try:
        return bool(json.loads(raw).get("releasing"))
    except (ValueError, AttributeError):
        return False


__all__ = ["HANDOFF_WAIT", "OWNED_BY", "OWNERS", "OwnerLookup", "OwnerUnreachable", "decode_owner", "is_releasing",
           "owner_key", "owner_tag"]
