"""The broker registry: who is in the cluster, followed by every broker.

Each broker holds an ephemeral record ``/nereus/cluster/brokers/{name}`` (its
addresses, zone, Kafka node id, state and load) bound to its metadata session: it
disappears when the broker stops or its session expires. Every broker follows the
set through change notifications (and a periodic full re-read, because a broken
notification stream may have missed changes) and rebuilds its routing ring.

Names are stable (default: advertised address and ports), so a broker that restarts
keeps its Kafka node id. A restarted broker overwrites a record left by its previous
incarnation: it could bind the ports the name stands for, so that one is dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Callable

from ...meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion, cas
from ...meta.api import Notification, NotificationType
from ...topics.placement import BrokerAddress
from .ring import HashRing
from ...tasks import wait_for

log = logging.getLogger(__name__)

BROKERS = "/nereus/cluster/brokers/"
NODE_IDS = "/nereus/cluster/node-ids/"
NEXT_NODE_ID = "/nereus/cluster/next-node-id"

_DEPARTED_KEPT = 1024
ACTIVE = "active"
DRAINING = "draining"


@dataclass(frozen=True)
class BrokerRecord:
    """A broker's registration as stored."""

    address: BrokerAddress
    incarnation: str
    state: str = ACTIVE
    started_ms: int = 0
    load: dict = field(default_factory=dict)
    #: Its listeners accept connections: from then on, one that refuses them means it died.
    serving: bool = False

    def encode(self) -> bytes:
        return json.dumps({"address": asdict(self.address), "incarnation": self.incarnation, "state": self.state,
                           "started_ms": self.started_ms, "load": self.load, "serving": self.serving}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> "BrokerRecord":
        value = json.loads(raw)
        return cls(_address(value["address"]), value["incarnation"], value.get("state", ACTIVE),
                   value.get("started_ms", 0), value.get("load") or {}, bool(value.get("serving", False)))


def _address(value: dict) -> BrokerAddress:
    """A stored address: fields a newer broker added are skipped, ones an older broker lacks get their defaults."""
    known = {k: v for k, v in value.items() if k in BrokerAddress.__dataclass_fields__}
    known["listeners"] = tuple(tuple(listener) for listener in known.get("listeners") or ())
    known["kafka_listeners"] = tuple(tuple(listener) for listener in known.get("kafka_listeners") or ())
    return BrokerAddress(**known)


async def node_id_for(meta: MetadataStore, name: str) -> int:
    """The Kafka node id of broker ``name``: allocated once from a counter, then stable."""
    key = NODE_IDS + name
    rec = await meta.get(key)
    while rec is None:
        counter = await cas.update(meta, NEXT_NODE_ID, lambda old: str(int(old or b"0") + 1).encode())
        candidate = int(counter.value) - 1
        try:
            await meta.put(key, str(candidate).encode(), expected_version_id=EXPECT_ABSENT)
        except UnexpectedVersion:
            pass  # another process registered the same name first: its id wins
        rec = await meta.get(key)
    return int(rec.value)


class Membership:
    """This broker's registration and the live set of brokers, as a ring."""

    def __init__(self, meta: MetadataStore, address: BrokerAddress, *, refresh_seconds: float = 5.0) -> None:
        self.meta = meta
        self.address = address
        self.refresh_seconds = refresh_seconds
        self.incarnation = uuid.uuid4().hex
        # Stamped once: every re-registration (state, load, a new incarnation) rewrites the record.
        self.started_ms = int(time.time() * 1000)
        self.state = ACTIVE
        self.load: dict = {}
        self.serving = False
        self.brokers: dict[str, BrokerRecord] = {}
        #: The last record of each broker that left the registry (where a dead owner listened).
        self.departed: dict[str, BrokerRecord] = {}
        # Refreshes overlap (the notification follower's, a lookup's ``forget``): the view of the
        # one started last wins, so a scan begun before a change cannot undo it when it ends late.
        self._refreshes_started = 0
        self._refresh_applied = 0
        self.ring: HashRing[BrokerAddress] = HashRing({})
        self._listeners: list[Callable[[], None]] = []
        self._task: asyncio.Task | None = None
        self._changed = asyncio.Event()
        self._version: int | None = None
        self._note_listeners: list[tuple[str, Callable[[Notification], None]]] = []
        #: True while every change is heard (``on_note``); ``subscriptions`` counts the times the
        #: notification stream was opened (changes between two of them were not heard).
        self.watching = False
        self.subscriptions = 0

    @property
    def name(self) -> str:
        return self.address.name

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after the ring changed."""
        self._listeners.append(listener)

    async def start(self) -> None:
        await self.register()
        await self.refresh()
        self._task = asyncio.ensure_future(self._follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _record(self) -> BrokerRecord:
        return BrokerRecord(self.address, self.incarnation, self.state, self.started_ms, self.load, self.serving)

    async def register(self, *, new_incarnation: bool = False) -> None:
        """Put this broker's ephemeral record (again, after a lost session: a new incarnation)."""
        if new_incarnation:
            self.incarnation = uuid.uuid4().hex
        await self._put_record()
        log.info("broker %s registered (node %d, zone %s, %s)", self.name, self.address.node_id, self.address.zone,
                 self.state)

    async def _put_record(self) -> None:
        result = await self.meta.put(BROKERS + self.name, self._record().encode(), ephemeral=True)
        self._version = result.version.version_id

    async def set_state(self, state: str) -> None:
        """Announce ``active`` or ``draining`` (a draining broker takes no new topics)."""
        self.state = state
        await self.register()
        await self.refresh()

    async def set_serving(self) -> None:
        """Announce that the listeners accept connections (registered before they do, a broker
        refuses connections while it starts: that must not read as its death)."""
        self.serving = True
        await self.register()

    async def publish_load(self, load: dict) -> None:
        self.load = load
        await self._put_record()  # the same registration, its load figures updated

    async def refresh(self) -> None:
        """Re-read every registration and rebuild the ring."""
        self._refreshes_started += 1
        ticket = self._refreshes_started
        brokers = {}
        async for rec in self.meta.range_scan(BROKERS, BROKERS + "\uffff"):
            try:
                record = BrokerRecord.decode(rec.value)
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring a malformed broker record %s", rec.key)
                continue
            brokers[record.address.name] = record
        if ticket < self._refresh_applied:
            return  # a refresh started after this one has applied what it read
        self._refresh_applied = ticket
        self._apply(brokers)

    def _apply(self, brokers: dict[str, BrokerRecord]) -> None:
        before = {n: (r.address, r.state) for n, r in self.brokers.items()}
        after = {n: (r.address, r.state) for n, r in brokers.items()}
        for name, record in self.brokers.items():
            if name not in brokers:
                self.departed.pop(name, None)
                self.departed[name] = record
                while len(self.departed) > _DEPARTED_KEPT:
                    del self.departed[next(iter(self.departed))]
        self.brokers = brokers
        if before == after:
            return
        self.ring = HashRing({n: (r.address.zone, r.address) for n, r in brokers.items() if r.state == ACTIVE})
        log.info("cluster: %d broker(s) live, %d active: %s", len(brokers), len(self.ring),
                 ", ".join(sorted(f"{n}({r.state})" for n, r in brokers.items())))
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("a ring listener failed")

    async def forget(self, record: BrokerRecord) -> None:
        """Remove a dead broker's registration before its session expires (it was seen dead:
        see ``OwnerLookup``); a newer incarnation's registration stays."""
        current = await self.meta.get(BROKERS + record.address.name)
        if current is not None:
            try:
                if BrokerRecord.decode(current.value).incarnation == record.incarnation:
                    await self.meta.delete(current.key, expected_version_id=current.version.version_id)
                    log.warning("broker %s (incarnation %s) refuses connections: removed from the registry "
                                "without waiting for its session to expire", record.address.name, record.incarnation)
            except UnexpectedVersion:
                pass  # it registered again meanwhile
            except (ValueError, KeyError, TypeError):
                pass
        await self.refresh()

    def live(self, name: str, incarnation: str | None = None) -> bool:
        record = self.brokers.get(name)
        return record is not None and (incarnation is None or record.incarnation == incarnation)

    def active(self) -> list[BrokerAddress]:
        return sorted((r.address for r in self.brokers.values() if r.state == ACTIVE), key=lambda a: a.node_id)

    def on_note(self, prefix: str, listener: Callable[[Notification], None]) -> None:
        """Call ``listener(note)`` for each change notification of a key under ``prefix``."""
        self._note_listeners.append((prefix, listener))

    async def _follow(self) -> None:
        watcher = asyncio.ensure_future(self._watch())
        try:
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await wait_for(self._changed.wait(), self.refresh_seconds)
                self._changed.clear()
                try:
                    await self.refresh()
                except Exception as exc:
                    log.warning("reading the broker registry failed: %s", exc)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _watch(self) -> None:
        while True:
            try:
                async with self.meta.notifications() as notes:
                    self._changed.set()  # changes before the subscription may have been missed
                    self.subscriptions += 1  # and whatever kept a view from notifications reads it again
                    self.watching = True
                    async for note in notes:
                        if note.key.startswith(BROKERS) or note.type == NotificationType.KEY_RANGE_DELETED:
                            self._changed.set()
                        for prefix, listener in self._note_listeners:
                            if note.key.startswith(prefix):
                                try:
                                    listener(note)
                                except Exception:
                                    log.exception("a notification listener failed")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("the metadata notification stream broke (%s); subscribing again", exc)
                self.watching = False  # now, not after the pause below: changes go unheard meanwhile
                await asyncio.sleep(1.0)
            finally:
                self.watching = False


__all__ = ["ACTIVE", "BROKERS", "DRAINING", "BrokerRecord", "Membership", "node_id_for"]
