"""A loaded topic: one stream as this broker serves it, shared by every protocol.

The topic owns the stream handle and with it the append session. The session is
taken on the first write only (``ensure_writer``, one acquisition at a time), never
for a read, so a reader on any broker never fences the writer. Taking it also
brings the deduplication state up to the committed end, so a resend after any
error is recognised whoever wrote last.

A failed append loses the session (``AppendSessionLost``) and a takeover fences it
(``StreamFenced``); either way the topic unloads itself: each protocol drops its
clients with the error that makes them look the topic up again, and the next load
starts from the stored truth (committed tail, cursors, dedup state).

Protocol state hangs off ``attachments`` (the Pulsar producers and subscriptions,
the Kafka partition); protocols hear of appends and of the unload through
listeners, so none reaches into another's internals.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from typing import Awaitable, Callable

from ..ledger.naming import TopicName
from ..storage import Stream, StreamFenced, key_view
from ..tasks import spawn, unless
from . import persistence
from .dedup import Dedup
from .key_compaction import entries_keys
from .key_log import KeyRecorder
from ..ledger.clusters import applied_replication_clusters
from ..ledger.policies import policies_key, topic_policies_key
from .throttle import dispatch_limit, publish_limit
from .time_marks import TimeMarks
from .traffic import TopicTraffic

log = logging.getLogger(__name__)


#: (kind, TopicPolicies field, namespace Policies field: a map of cluster name to the policy).
_RATE_FIELDS = (("publish", "publishRate", "publishMaxMessageRate"),
                ("dispatch", "dispatchRate", "topicDispatchRate"),
                ("subscription", "subscriptionDispatchRate", "subscriptionDispatchRate"))


def _local(per_cluster) -> dict | None:
    """A namespace rate policy: one entry per cluster, this (only) cluster's."""
    if isinstance(per_cluster, dict) and per_cluster:
        return next(iter(per_cluster.values()))
    return None


class TopicUnloaded(StreamFenced):
    """The topic was unloaded (its stream moved or its session was lost); look it up again."""


#: The rate policies of a topic with none (shared: replaced, never changed in place).
_NO_RATES: dict[str, dict | None] = {"publish": None, "dispatch": None, "subscription": None}


class Topic:
    """The broker-side state of one stream that every protocol shares.

    A broker may hold a great many loaded topics, most of them idle: the class has slots, and
    what only a writing or replicated topic needs (the writer lock, the abandon future, rate
    limits) is made on first use.
    """

    __slots__ = ("registry", "meta", "name", "handle", "stream_id", "dedup", "time_marks", "key_log",
                 "attachments", "traffic", "closed", "_loop", "_abandoned", "last_active",
                 "_append_listeners", "_unload_listeners", "_busy_checks", "rate_policies", "end_at_load",
                 "publish_limit", "dispatch_limit", "publish_rate_limited", "replication_clusters", "__weakref__")

    def __init__(self, registry, name: TopicName, handle: Stream) -> None:
        self.registry = registry
        self.meta = registry.meta
        self.name = name
        self.handle = handle
        self.stream_id = handle.stream_id
        self.dedup = Dedup(registry.meta, handle.stream_id)
        self.time_marks = TimeMarks(registry.meta, handle)
        self.key_log = KeyRecorder(registry.storage, handle.stream_id, entries_keys, session=handle)
        self.attachments: dict[str, object] = {}
        self.traffic = TopicTraffic(str(name))  # counts and rates of both protocols
        self.closed = False
        self._loop = asyncio.get_running_loop()
        self._abandoned: asyncio.Future | None = None
        self.last_active = time.monotonic()
        # Each topic's own listeners, tuples grown on the rare add; what every topic needs (the Pulsar
        # state's) is the registry's, called with the topic (``TopicRegistry.on_any_append`` ...).
        self._append_listeners: tuple[Callable[[], None], ...] = ()
        self._unload_listeners: tuple[Callable[[str], Awaitable[None] | None], ...] = ()
        self._busy_checks: tuple[Callable[[], bool], ...] = ()
        self.end_at_load = -1  # the stream's end once loaded (where a new replicator starts)
        # Rate policies (Pulsar's publishRate / dispatchRate / subscriptionDispatchRate): the
        # policy JSON in force (the topic's, else the namespace's) and the topic-wide limits.
        self.rate_policies: dict[str, dict | None] = _NO_RATES
        self.publish_limit = None
        self.dispatch_limit = None
        self.publish_rate_limited = 0  # times a producer's connection was paused (publishRateLimitedTimes)
        self.replication_clusters: tuple[str, ...] = ()  # Pulsar's replication clusters (the local one included)

    @property
    def abandoned(self) -> asyncio.Future:
        """Done when the broker drops the topic without finishing its writes (its metadata session
        was lost, see ``abandon``): appends in flight will not be answered here, their waiters stop
        waiting. A future, not an event: waiting for it or an append needs no task. Until then it is
        the registry's, shared by every topic (all are abandoned at once)."""
        return self._abandoned if self._abandoned is not None else self.registry.abandoned

    # -- lifecycle ------------------------------------------------------------------------
    async def load(self) -> None:
        await self.dedup.restore(self.handle)
        if self.handle.created:  # no key view yet
            await self.read_policies()
            return
        _, view = await asyncio.gather(self.read_policies(), key_view.state(self.meta, self.stream_id))
        if view.horizon > 0:
            self.key_log.enable()  # compacted before: it will be again

    async def read_policies(self) -> None:
        """Apply the namespace's deduplication policy (the broker default when unset) and the
        rate policies (the topic's own, else the namespace's)."""
        base = self.name.base
        rec, own_rec = await self.meta.get_many([policies_key(self.name.tenant, self.name.namespace),
                                                 topic_policies_key(base.tenant, base.namespace, base.local)])
        namespace = json.loads(rec.value) if rec is not None else {}
        value = namespace.get("deduplicationEnabled")
        enabled = value if isinstance(value, bool) else self.registry.deduplication_enabled
        if enabled != self.dedup.enabled:
            log.info("%s: deduplication %s", self.name, "enabled" if enabled else "disabled")
        self.dedup.enabled = enabled
        own = json.loads(own_rec.value) if own_rec is not None else {}
        durability = persistence.durability_of(own.get(persistence.FIELD) or namespace.get(persistence.FIELD),
                                               self.registry.storage.durability)
        if durability != self.handle.durability:
            log.info("%s: acknowledged writes go to the %s WAL (%d/%d/%d)", self.name, durability.profile,
                     durability.ensemble, durability.write_quorum, durability.ack_quorum)
            await self.handle.set_durability(durability)
        rates = {kind: own.get(topic_field) or _local(namespace.get(namespace_field))
                 for kind, topic_field, namespace_field in _RATE_FIELDS}
        self._apply_rates(rates if any(rates.values()) else _NO_RATES)
        self.replication_clusters = tuple(applied_replication_clusters(own, namespace))
        threshold = own.get("compactionThreshold")
        if (threshold if threshold is not None else namespace.get("compaction_threshold") or 0) > 0:
            self.key_log.enable()
        self.registry.policies_read(self)

    def _apply_rates(self, policies: dict[str, dict | None]) -> None:
        """Rebuild only the limits whose policy changed: a refresh must not refill a bucket."""
        old, self.rate_policies = self.rate_policies, policies
        if policies["publish"] != old["publish"]:
            self.publish_limit = publish_limit(policies["publish"])
        if policies["dispatch"] != old["dispatch"]:
            self.dispatch_limit = dispatch_limit(policies["dispatch"], publish_rates=self.traffic.inbound.rates)
        if policies != old:
            log.info("%s: rate policies %s", self.name, {k: v for k, v in policies.items() if v})

    def on_append(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after each committed append (wakes readers of this broker)."""
        self._append_listeners += (listener,)

    def abandon(self) -> None:
        """Tell whoever waits on this topic's appends that they will not be answered here (with
        the registry's future, by ``TopicRegistry.abandon_all``)."""
        if self._abandoned is None:
            self._abandoned = self._loop.create_future()
            self._abandoned.set_result(None)

    def on_unload(self, listener: Callable[[str], Awaitable[None] | None]) -> None:
        """Call ``listener(reason)`` when the topic unloads (drop clients, close state)."""
        self._unload_listeners += (listener,)

    def busy_while(self, check: Callable[[], bool]) -> None:
        """The topic is not unloaded for idleness while ``check()`` is True (clients attached)."""
        self._busy_checks += (check,)

    def busy(self) -> bool:
        return (any(check(self) for check in self.registry.busy_checks) or any(check() for check in self._busy_checks)
                or bool(self.dedup.inflight))

    def touch(self) -> None:
        self.last_active = time.monotonic()

    async def run_unload_listeners(self, reason: str) -> None:
        """Start every listener at once, then wait for them all: one that waits on the metadata
        plane (a cursor flush) must not keep the others' clients attached meanwhile."""
        pending = []
        for listener in (*(functools.partial(hook, self) for hook in self.registry.unload_listeners),
                         *self._unload_listeners):
            try:
                result = listener(reason)
            except Exception:
                log.exception("%s: an unload listener failed", self.name)
                continue
            if asyncio.iscoroutine(result):
                pending.append(asyncio.ensure_future(result))
        for outcome in await asyncio.gather(*pending, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.error("%s: an unload listener failed", self.name, exc_info=outcome)

    async def close(self) -> None:
        self.closed = True
        self.traffic.close()
        try:
            await self.dedup.snapshot()
        except Exception:
            log.exception("%s: dedup snapshot at close failed", self.name)
        await self.key_log.close()
        await self.handle.close()
        # Each protocol's state refers back to the topic: dropped here, the topic and all it held
        # go with the last reference, not at a collection of cycles (a server freezes its
        # survivors, so that could be minutes later).
        self.attachments = {}

    # -- writes ---------------------------------------------------------------------------
    async def ensure_writer(self) -> None:
        """Hold the stream's append session (one acquisition at a time), dedup state current.

        Raises StreamFenced (TopicUnloaded) if the topic unloaded meanwhile.
        """
        if self.closed:
            raise TopicUnloaded(f"{self.name} was unloaded")
        if self.handle.writable:
            return
        # A broker that loses its metadata session abandons the topic: whoever waits here (a
        # producer being created, a Kafka produce) is told at once, not when metadata answers.
        taken, _ = await unless(self._take_writer(), self.abandoned)
        if not taken:
            raise TopicUnloaded(f"{self.name} was abandoned: this broker lost its metadata session")

    async def _take_writer(self) -> None:
        async with self.registry.writer_locks.hold(self):
            if self.closed:
                raise TopicUnloaded(f"{self.name} was unloaded")
            if self.handle.writable:
                return
            await self.registry.claim(self.name)  # NotOwner: another broker serves it
            await self.handle.acquire()
            await self.dedup.restore(self.handle, current=True)
            # Beside the first appends (it may read hundreds of objects); lookups by time only
            # scan further without marks, so a failure is no reason to refuse writes.
            spawn(self.time_marks.restore(), f"{self.name}: restoring time marks")
            log.info("%s: append session %s taken at offset %d", self.name, self.handle.fencing_token,
                     self.handle.next_offset())

    def append(self, data: bytes, count: int, keys=None) -> asyncio.Task:
        """Start an append now (call order = offset order); the task yields the AppendResult.

        ``keys``: the entry's keys when the caller decoded them anyway (``KeyRecorder.committed``).
        A failure that ends the session unloads the topic (see the module docstring).
        """
        self.touch()
        task = self._loop.create_task(self.handle.append(data, count))
        task.add_done_callback(lambda t: self._append_done(t, data, count, keys))
        return task

    def _append_done(self, task: asyncio.Task, data: bytes, count: int, keys=None) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            base = task.result().base_offset
            self.time_marks.committed(base, count, data)
            self.key_log.committed(base, count, data, keys)
            for hook in self.registry.append_listeners:
                hook(self)
            for listener in self._append_listeners:
                listener()
        elif isinstance(exc, StreamFenced) or not self.handle.writable:
            self.registry.unload_soon(self, f"{type(exc).__name__}: {exc}")


__all__ = ["Topic", "TopicUnloaded"]
