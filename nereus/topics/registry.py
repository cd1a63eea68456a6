"""The topics this broker has loaded: loading, unloading, idle expiry.

One registry per broker process, shared by the Pulsar and Kafka listeners, the
admin API and the lakehouse writers. ``get`` loads a topic once however many
callers race for it, and waits for an unload of the same topic to finish first, so
a reloaded topic always starts from the stored truth. Topics with no client
attached and no append for ``idle_seconds`` are unloaded, so memory follows the
topics in use, not every topic ever touched.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time

from ..cyclic_gc import collect_everything
from ..ledger.naming import TopicName
from ..meta import MetadataStore
from ..storage import StreamStorage
from ..tasks import KeyedLocks, wait_for
from .autocreate import AutoCreation
from .dedup import BROKER_DEDUPLICATION_ENABLED
from .key_compaction import KeyCompactor, KeyViews
from .placement import BrokerAddress, Placement
from .topic import Topic

# The placement of a registry used without a cluster: this process serves every topic.
LOCAL = BrokerAddress("local", 0, "default", "", "", 0, "")

log = logging.getLogger(__name__)
#: How long a build waits for the topic's pending keys to be written to its key log.
DRAIN_SECONDS = 5.0
SWEEP_SECONDS = 60.0  # longest pause between two passes over the loaded topics (idle unloads, cache aging)


#: Topics unloaded (in one sweep or several) after which the C allocator is asked to give free
#: memory back.
TRIM_AFTER_UNLOADS = 1000
#: Idle topics unloaded at once by a sweep.
IDLE_UNLOADS_AT_ONCE = 32


def _trim_heap() -> None:
    """glibc's ``malloc_trim(0)``: free pages at the top and inside the heap go back to the OS."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            _malloc_trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc: nothing to ask
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim = None


class TopicRegistry:
    """Loaded topics of one broker."""

    def __init__(self, storage: StreamStorage, meta: MetadataStore, *, idle_seconds: float = 300.0,
                 placement: Placement | None = None,
                 deduplication_enabled: bool = BROKER_DEDUPLICATION_ENABLED,
                 auto_creation: AutoCreation = AutoCreation(),
                 schema_compatibility_strategy: str = "FULL") -> None:
        self.storage = storage
        # The broker's schemaCompatibilityStrategy, for namespaces and topics without a policy.
        self.schema_compatibility_strategy = schema_compatibility_strategy
        # The broker's allowAutoTopicCreation settings (a namespace policy may override them).
        self.auto_creation = auto_creation
        self.meta = meta
        # The broker's default (Pulsar's brokerDeduplicationEnabled) for namespaces without a policy.
        self.deduplication_enabled = deduplication_enabled
        self.placement = placement if placement is not None else Placement(LOCAL)
        self.idle_seconds = idle_seconds
        self.topics: dict[str, Topic] = {}
        # Topics served from memory alone (Pulsar's non-persistent ones), by name: each has
        # ``disconnect_clients()``. They keep their owner claim while present.
        self.memory_topics: dict[str, object] = {}
        self._loading: dict[str, asyncio.Future] = {}
        self._unloading: dict[str, asyncio.Future] = {}
        self._unloads_untrimmed = 0  # topics unloaded since the heap was last trimmed
        self.writer_locks = KeyedLocks()  # a topic's while it takes its stream's append session
        self._tasks: set[asyncio.Task] = set()
        self._loaded_listeners: list = []
        self._abandoned: asyncio.Future | None = None
        self._policy_listeners: list = []
        self.append_listeners: list = []
        self.unload_listeners: list = []
        self.busy_checks: list = []
        self._unloading_listeners: list = []
        self._sweeper: asyncio.Task | None = None
        # Key-compacted views: built by this broker for its topics, cached for readers.
        self.key_views = KeyViews(storage)
        self.key_compactor = KeyCompactor(storage, owner=storage.node_id, on_built=self.key_views.drop,
                                          before_build=self._drain_key_log)

    async def _drain_key_log(self, name: str) -> None:
        """Before a build of ``name``: its pending keys written (a slow log: the build reads them)."""
        topic = self.topics.get(name)
        if topic is not None:
            try:
                await wait_for(topic.key_log.drain(), DRAIN_SECONDS)
            except TimeoutError:
                log.info("%s: key log not drained in %g s; the build reads the rest", name, DRAIN_SECONDS)

    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.ensure_future(self._sweep_loop())

    def on_load(self, listener) -> None:
        """Call ``listener(topic)`` for each topic loaded from now on."""
        self._loaded_listeners.append(listener)

    # Listeners of every loaded topic, called with the topic: a protocol's state hangs off each topic
    # (an attachment) without each topic holding the protocol's callbacks.
    def on_any_append(self, listener) -> None:
        """Call ``listener(topic)`` after each committed append to any loaded topic."""
        self.append_listeners.append(listener)

    def on_any_unload(self, listener) -> None:
        """Call ``listener(topic, reason)`` (it may be a coroutine function) as any topic unloads,
        beside the topic's own unload listeners."""
        self.unload_listeners.append(listener)

    def busy_while_any(self, check) -> None:
        """No topic is unloaded for idleness while ``check(topic)`` is True."""
        self.busy_checks.append(check)

    def on_policies(self, listener) -> None:
        """Call ``listener(topic)`` each time a topic's policies were read (at its load, and again
        after a change through any broker): one listener for all topics, none held by each."""
        self._policy_listeners.append(listener)

    def policies_read(self, topic: Topic) -> None:
        for listener in self._policy_listeners:
            listener(topic)

    def on_unloading(self, listener) -> None:
        """Call ``listener(name)`` as each loaded topic starts to unload (before its own listeners)."""
        self._unloading_listeners.append(listener)

    def loaded(self, name: TopicName | str) -> Topic | None:
        return self.topics.get(str(name))

    def in_use(self, name: TopicName | str) -> bool:
        """Loaded, or served from memory: its owner claim is still needed."""
        return str(name) in self.topics or str(name) in self.memory_topics

    def drop_memory_topic(self, name: TopicName | str) -> None:
        """Tell the clients of a topic served from memory to look it up again, and forget it."""
        topic = self.memory_topics.pop(str(name), None)
        if topic is not None:
            topic.disconnect_clients()

    async def claim(self, name: TopicName | str) -> None:
        """Make sure this broker may serve ``name``'s writes; raises NotOwner when another does."""
        await self.placement.claim(str(name))

    async def get(self, name: TopicName, *, likely_absent: bool = False) -> Topic:
        """The loaded topic, opening (and auto-creating) its stream on first use (reads need no claim).

        ``likely_absent``: the caller just found no such stream (see ``StreamStorage.open_stream``)."""
        key = str(name)
        while True:
            topic = self.topics.get(key)
            if topic is not None and not topic.closed:
                return topic
            unloading = self._unloading.get(key)
            if unloading is None:
                break
            await asyncio.shield(unloading)
        loading = self._loading.get(key)
        if loading is None:
            loading = self._loading[key] = asyncio.ensure_future(self._load(name, likely_absent))
            loading.add_done_callback(lambda _f: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load(self, name: TopicName, likely_absent: bool = False) -> Topic:
        handle = await self.storage.open_stream(str(name), create=True, likely_absent=likely_absent)
        topic = Topic(self, name, handle)
        await topic.load()
        topic.end_at_load = handle.next_offset()
        for listener in self._loaded_listeners:
            listener(topic)
        self.topics[str(name)] = topic
        log.info("topic %s loaded (stream %d, next offset %d)", name, handle.stream_id, handle.next_offset())
        return topic

    @property
    def abandoned(self) -> asyncio.Future:
        """The future every loaded topic's ``abandoned`` is until ``abandon_all``."""
        if self._abandoned is None:
            self._abandoned = asyncio.get_running_loop().create_future()
        return self._abandoned

    def abandon_all(self, reason: str) -> None:
        """Unload every topic now, and every topic being loaded once it is, without waiting for
        anything (the broker lost its metadata session): clients go at once, waiters on appends
        are told (``Topic.abandoned``), the rest finishes in the background."""
        for topic in list(self.topics.values()):
            self.unload_soon(topic, reason, abandon=True)
        # Each of those topics has its own done future now; the shared one wakes whoever waited
        # on it, and topics loaded from now on get a new one.
        told, self._abandoned = self._abandoned, None
        if told is not None:
            told.set_result(None)
        for loading in list(self._loading.values()):
            loading.add_done_callback(lambda f: f.cancelled() or f.exception() is not None
                                      or self.unload_soon(f.result(), reason, abandon=True))
        for name in list(self.memory_topics):
            self.drop_memory_topic(name)

    def unload_soon(self, topic: Topic, reason: str, *, abandon: bool = False) -> None:
        """Unload ``topic`` in the background (from callbacks that cannot wait)."""
        if abandon:
            topic.abandon()
        if topic.closed or str(topic.name) in self._unloading:
            return
        task = asyncio.ensure_future(self.unload(topic, reason, abandon=abandon))
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("unloading a topic failed", exc_info=task.exception())

    async def unload(self, topic: Topic, reason: str, *, abandon: bool = False) -> None:
        """Drop the topic's clients and state; the next ``get`` loads it afresh.

        ``abandon``: the broker lost its right to the topic (its metadata session): waiters
        on appends in flight are told at once (``Topic.abandoned``) instead of after the flush.
        """
        if abandon:
            topic.abandon()
        key = str(topic.name)
        pending = self._unloading.get(key)
        if pending is not None:
            await asyncio.shield(pending)
            return
        if topic.closed:
            return
        done = self._unloading[key] = asyncio.get_running_loop().create_future()
        try:
            topic.closed = True
            if self.topics.get(key) is topic:
                del self.topics[key]
            log.info("topic %s unloading: %s", key, reason)
            started = time.monotonic()
            for listener in self._unloading_listeners:
                try:
                    listener(key)
                except Exception:
                    log.exception("%s: an unloading listener failed", key)
            await topic.run_unload_listeners(reason)
            detached = time.monotonic()
            try:
                await topic.close()
            except Exception:
                log.exception("closing topic %s failed", key)
            log.info("topic %s unloaded in %.0f ms (clients and state %.0f ms, flush and release %.0f ms)", key,
                     (time.monotonic() - started) * 1000, (detached - started) * 1000,
                     (time.monotonic() - detached) * 1000)
        finally:
            del self._unloading[key]
            self._unloads_untrimmed += 1
            done.set_result(None)

    async def unload_idle(self, now: float | None = None) -> int:
        """Unload topics with nothing attached and no append for ``idle_seconds``."""
        now = time.monotonic() if now is None else now
        idle = [t for t in list(self.topics.values()) if self._idle(t, now)]
        pending = iter(idle)
        unloaded = 0

        async def unloader() -> None:
            # Each unload waits on the metadata plane (its ownership record, a cursor flush):
            # one at a time, a broker of 300,000 idle topics would take hours.
            nonlocal unloaded
            for topic in pending:
                if self._idle(topic, now):  # not taken again while others were unloading
                    await self.unload(topic, "idle")
                    unloaded += 1

        await asyncio.gather(*(unloader() for _ in range(min(IDLE_UNLOADS_AT_ONCE, len(idle)))))
        if self._unloading or not self._unloads_untrimmed:
            return unloaded
        if self._unloads_untrimmed >= TRIM_AFTER_UNLOADS:
            # Topics unload a sweep's worth at a time as they go idle; once many have, what cycles
            # are left among them are freed now, not at the collector's next thaw, and the freed
            # memory the allocator still maps goes back (off the loop: it walks the heap).
            collect_everything()
        elif unloaded:
            return unloaded  # more may follow: trimmed when they stop
        self._unloads_untrimmed = 0
        await asyncio.get_running_loop().run_in_executor(None, _trim_heap)
        return unloaded

    def _idle(self, topic: Topic, now: float) -> bool:
        return now - topic.last_active >= self.idle_seconds and not topic.busy()

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(min(SWEEP_SECONDS, max(self.idle_seconds / 4, 0.05)) if self.idle_seconds > 0
                                else SWEEP_SECONDS)
            # Quiet streams' cached entries age out even where nothing is appended any more.
            self.storage.tail_cache.evict_aged()
            if self.idle_seconds <= 0:
                continue  # 0: topics are never unloaded for idleness
            try:
                await self.unload_idle()
            except Exception:
                log.exception("unloading idle topics failed")

    async def close(self) -> None:
        await self.key_compactor.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            await asyncio.gather(self._sweeper, return_exceptions=True)
        for topic in list(self.topics.values()):
            await self.unload(topic, "broker stopping")
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


__all__ = ["TopicRegistry"]
