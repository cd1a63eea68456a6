"""The dispatch loop of one subscription: read entries, pick consumers, send MESSAGEs.

One task per subscription with consumers. A round first replays entries waiting
for redelivery (in offset order), then reads new entries from the cursor's read
position. It sleeps on an event woken by appends, FLOW permits, acks (which may
unblock a key), redeliveries, seeks, consumer changes and due delayed entries.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time

from ...ledger.errors import CursorFenced
from ...ledger.subscription import ConsumerSlot, Subscription, SubType
from ...storage import FetchedEntry, OffsetOutOfRange, StorageError
from ...topics.rates import RateMeter
from ...topics.throttle import dispatch_limit
from . import entries, metrics, visibility
from .pending_acks import PendingAcks, settled
from .view_floor import view_floor
from ...tasks import wait_for

log = logging.getLogger(__name__)

READ_BYTES = 1 << 20
MAX_REPLAY = 10_000  # Key_Shared: stop reading ahead when this many entries wait for a blocked key
IDLE_POLL = 2.0


THROTTLE_EVENTS = tuple(f"dispatchThrottled{unit}EventsBy{scope}Limit"
                         for scope in ("Subscription", "Topic", "Broker") for unit in ("Msg", "Bytes"))


class Dispatcher:
    """Owns a Subscription and feeds its consumers."""

    def __init__(self, topic, sub: Subscription) -> None:
        self.topic = topic
        self.sub = sub
        self.generation = 0  # bumped by seeks: a round that raced with one is dropped
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._delayed: list[tuple[int, int, int]] = []  # (deliver_at ms, base, count)
        self._delayed_set: set[int] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._persist_task: asyncio.Task | None = None
        self._closing: asyncio.Future | None = None
        self._closed = False
        self.redelivered = RateMeter()  # msgRateRedeliver of the subscription's stats
        self.read_compacted = False  # below the key view's horizon, read the view (set by SUBSCRIBE)
        # The subscription's dispatch rate (built from the topic's policy of it) and how
        # often a rate held dispatch back, under Pulsar's SubscriptionStats names.
        self._sub_policy: dict | None = None
        self._sub_limit = None
        self._throttle_timer: asyncio.TimerHandle | None = None
        self.throttle_events = dict.fromkeys(THROTTLE_EVENTS, 0)
        self.txn_acks = PendingAcks()  # records acknowledged in open transactions (pending_acks.py)
        sub.cursor.on_fenced = self._cursor_fenced

    @property
    def name(self) -> str:
        return self.sub.name

    def wake(self) -> None:
        self._wake.set()
        if self._task is None and not self._closed:
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.sub.cursor.dirty:
            try:
                await self.sub.cursor.persist()
            except CursorFenced:
                pass  # reported by _cursor_fenced; the other owner's record stands
            except Exception:
                log.exception("%s: cursor %s not persisted at close", self.topic.name, self.name)

    def reset(self, position: int) -> None:
        self.generation += 1
        self.sub.reset(position)
        self._delayed.clear()
        self._delayed_set.clear()
        self.schedule_persist()
        self.wake()

    def schedule_persist(self) -> None:
        """Persist the cursor soon; writes coalesce while one is in flight."""
        if self._persist_task is None or self._persist_task.done():
            self._persist_task = asyncio.ensure_future(self._persist())

    async def _persist(self) -> None:
        try:
            while self.sub.cursor.dirty:
                await self.sub.cursor.persist()
        except CursorFenced:
            pass  # reported by _cursor_fenced
        except Exception:
            log.exception("%s: persisting cursor %s failed", self.topic.name, self.name)

    def _cursor_fenced(self, exc: CursorFenced) -> None:
        """Someone else wrote the cursor: stop serving this stale copy.

        Writing it again would overwrite the other writer's acknowledgements, so the
        dispatcher leaves the topic and the consumers are told to reconnect; their
        resubscribe opens the cursor again from the metadata plane, and what they had
        not acknowledged there is redelivered.
        """
        log.warning("%s: %s; consumers of %s reconnect to reload it", self.topic.name, exc, self.name)
        if self.topic.dispatchers.get(self.name) is self:
            del self.topic.dispatchers[self.name]
        self.topic.close_consumers(self)
        if self._closing is None:
            self._closing = asyncio.ensure_future(self.close())

    # -- the loop ------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            try:
                progressed = await self._round()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("%s: dispatch round of %s failed", self.topic.name, self.name)
                progressed = False
                await asyncio.sleep(0.5)
            if not progressed:
                try:
                    await wait_for(self._wake.wait(), IDLE_POLL)
                except asyncio.TimeoutError:
                    if not self.sub.consumers:
                        self._task = None
                        return
                    await self.topic.handle.refresh()

    async def _round(self) -> bool:
        sub = self.sub
        if not sub.consumers or not sub.has_permits() or self._throttled():
            return False
        self._release_delayed()
        generation = self.generation
        key_shared = sub.type == SubType.KEY_SHARED
        blocked: set[int] = set()
        progressed = False
        for base in sorted(sub.replay):
            if not sub.has_permits() or self._throttled():
                return progressed
            entry = await self._read_one(base)
            if generation != self.generation:
                return True
            if base not in sub.replay:
                continue  # acked or dispatched meanwhile
            if entry is None or settled(sub, self.txn_acks, entry.base_offset, entry.record_count):
                sub.replay.discard(base)
                continue
            key = self._key(entry) if key_shared else None
            if key in blocked:
                continue
            slot = sub.choose(key)
            if slot is None:
                if key_shared:
                    blocked.add(key)
                    continue
                return progressed
            self._send(slot, entry, key)
            progressed = True
        if sub.replay and not key_shared:
            return progressed  # new entries wait until every redelivery went out (ordering)
        return await self._read_new(generation, blocked) or progressed

    async def _read_new(self, generation: int, blocked: set[int]) -> bool:
        sub, handle = self.sub, self.topic.handle
        pos = sub.cursor.read_position
        if pos >= handle.next_offset() or not sub.has_permits():
            return False
        # Never past the last stable offset (Pulsar's maxReadPosition): an open
        # transaction's records wait for its marker; the listener of the stream's
        # transaction index wakes this loop when the LSO moves.
        txns = await visibility.view(self.topic)
        limit = handle.next_offset() if txns is None else txns.lso
        if pos >= limit:
            return False
        start = pos
        compacted = await self._compacted(pos) if self.read_compacted else None
        if compacted is not None:
            fetched, view_end, view = compacted
        else:
            view_end = view = None
            try:
                fetched = (await handle.fetch(pos, limit, max_bytes=READ_BYTES)).entries
            except OffsetOutOfRange:
                await handle.refresh()
                if generation == self.generation and sub.cursor.read_position < handle.start_offset():
                    sub.cursor.read_position = handle.start_offset()
                    return True
                return False
        if generation != self.generation:
            return True
        key_shared = sub.type == SubType.KEY_SHARED
        shared = sub.type in (SubType.SHARED, SubType.KEY_SHARED)
        skipped = False
        for entry in fetched:
            if entry.end_offset <= pos:
                continue
            if self._throttled():
                break
            if view is not None:
                # What compaction dropped before and within this entry counts as acknowledged
                # (only as far as the dispatch gets: a read ending early for lack of
                # permits must not make the next one go over the same gaps again).
                sub.cursor.ack_ranges(view.dropped_between(pos, entry.end_offset))
            base, count = entry.base_offset, entry.record_count
            if base >= limit and compacted is None:
                break
            if settled(sub, self.txn_acks, base, count) or base in sub.pending or base in self._delayed_set:
                pos = entry.end_offset
                continue
            header, body = entries.split(entry.data)
            if visibility.hidden(header, base, txns):
                # A marker, or a record of an aborted transaction: never delivered, and
                # acknowledged so the backlog does not keep counting it.
                sub.cursor.ack(base, entry.end_offset)
                skipped = True
                pos = entry.end_offset
                continue
            if shared:
                at = entries.deliver_at(header, body)
                if at is not None:
                    self._delay(at, base, count)
                    pos = entry.end_offset
                    continue
            key = entries.sticky_key(body) if key_shared else None
            if key_shared and key in blocked:
                self._park(base, count)
                pos = entry.end_offset
                continue
            slot = sub.choose(key)
            if slot is None:
                if key_shared and sub.has_permits() and len(sub.replay) < MAX_REPLAY:
                    blocked.add(key)
                    self._park(base, count)
                    pos = entry.end_offset
                    continue
                break
            self._send(slot, entry, key)
            pos = entry.end_offset
        else:
            if view_end is not None:  # the rest of the view was compacted away
                sub.cursor.ack_ranges(view.dropped_between(pos, view_end))
                pos = max(pos, view_end)
        sub.cursor.read_position = pos
        if skipped:
            self.schedule_persist()
        return pos != start

    async def _compacted(self, pos: int):
        """Below the key view's horizon: (the view's entries from ``pos``, the horizon if they
        end the view, else None, the view); None at or above it.

        The records compacted away count as acknowledged (as Pulsar skips them), so the
        entries go out with an ack set of their surviving records and the subscription's
        mark-delete moves past the gaps: the dispatch loop records them entry by entry;
        the view's records that retention released (``view_floor``) are recorded here.
        """
        view = await self.topic.core.registry.key_views.get(self.topic.stream_id)
        if pos >= view.horizon:
            return None
        start = max(pos, await view_floor(self.topic))
        if pos < start:
            self.sub.cursor.ack(pos, start)
        items = view.read(start, READ_BYTES)
        done = not items or items[-1] is view.entries[-1]
        return [item.entry for item in items], (view.horizon if done else None), view

    # -- dispatch rates ------------------------------------------------------------------
    def _limits(self):
        core = self.topic.core
        policy = core.rate_policies["subscription"]
        if policy != self._sub_policy:
            self._sub_policy, self._sub_limit = policy, dispatch_limit(policy, publish_rates=core.traffic.inbound.rates)
        return core.dispatch_limit, self._sub_limit

    def _throttled(self) -> bool:
        """True, with a wake-up armed for when it refills, while the topic's or the
        subscription's dispatch rate is spent."""
        for scope, limit in zip(("Topic", "Subscription"), self._limits()):
            if limit is None:
                continue
            delay, kind = limit.delay()
            if delay > 0:
                self.throttle_events[f"dispatchThrottled{'Msg' if kind == 'msg' else 'Bytes'}EventsBy{scope}Limit"] += 1
                if self._throttle_timer is None:
                    self._throttle_timer = asyncio.get_running_loop().call_later(delay, self._throttle_elapsed)
                return True
        return False

    def _throttle_elapsed(self) -> None:
        self._throttle_timer = None
        self.wake()

    # -- helpers -------------------------------------------------------------------------
    async def _read_one(self, base: int) -> FetchedEntry | None:
        if self.read_compacted:
            view = await self.topic.core.registry.key_views.get(self.topic.stream_id)
            if base < view.horizon:
                if base < await view_floor(self.topic):
                    return None
                item = view.entry_at(base)
                return item.entry if item is not None else None
        try:
            result = await self.topic.handle.fetch(base, base + 1, max_bytes=1)
        except (OffsetOutOfRange, StorageError):
            return None
        for entry in result.entries:
            if entry.base_offset <= base < entry.end_offset:
                return entry
        return None

    def _key(self, entry: FetchedEntry) -> int:
        return entries.sticky_key(entries.body_of(entry.data))

    def _park(self, base: int, count: int) -> None:
        self.sub.replay.add(base)
        self.sub.remember_size(base, count)

    def _send(self, slot: ConsumerSlot, entry: FetchedEntry, key: int | None) -> None:
        sub = self.sub
        base, count = entry.base_offset, entry.record_count
        ack_set = None
        if count > 1:
            acked = sub.cursor.acks.acked_ranges_between(base, base + count)
            if acked or self.txn_acks.holder(base, base + count) is not None:
                ack_set = _unacked_bits(base, count, acked, self.txn_acks)
        body = entries.body_of(entry.data)
        redelivery = sub.dispatched(slot, base, count, key, permits=self._messages_sent(body, count))
        for limit in self._limits():
            if limit is not None:
                limit.take(count, len(body))
        slot.handle.send_message(base, body, redelivery, ack_set)
        self.topic.traffic.delivered(sub.name, count, len(body))
        slot.handle.meter.record(count, len(body))
        if redelivery:
            metrics.REDELIVERED.labels(str(self.topic.name), sub.name).inc()
            self.redelivered.record(count, len(body))

    def _messages_sent(self, body: memoryview, count: int) -> int:
        """The messages a client counts in ``body``: the permits its delivery uses.

        A view entry's batch may end before the stored entry's last record (compaction
        cut it after its last kept message); the client returns one permit per message
        the batch holds, so charging the stored count would leak permits until the
        consumer stalls.
        """
        if not self.read_compacted or count < 2:
            return count
        meta = entries.metadata_of(body)
        return meta.num_messages_in_batch if meta.HasField("num_messages_in_batch") else count

    def _delay(self, at: int, base: int, count: int) -> None:
        heapq.heappush(self._delayed, (at, base, count))
        self._delayed_set.add(base)
        self._arm_timer()

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._delayed:
            delay = max(0.0, self._delayed[0][0] / 1000 - time.time())
            self._timer = asyncio.get_running_loop().call_later(delay + 0.001, self.wake)

    def _release_delayed(self) -> None:
        now = time.time() * 1000
        while self._delayed and self._delayed[0][0] <= now:
            _, base, count = heapq.heappop(self._delayed)
            self._delayed_set.discard(base)
            self._park(base, count)
        self._arm_timer()


def _unacked_bits(base: int, count: int, acked: list[tuple[int, int]], held: PendingAcks) -> list[int]:
    """Pulsar's ack_set of a partly acked batch: bit i set = record i still to deliver.

    Built from the cursor's ``acked`` ranges within the batch, not record by record: a
    compacted view's batches come with most of their records acknowledged.
    """
    bits = (1 << count) - 1
    for start, end in acked:
        bits &= ~(((1 << (end - start)) - 1) << (start - base))
    if held.by_pid:
        for i in range(count):
            if bits >> i & 1 and held.is_held(base + i):
                bits &= ~(1 << i)
    words = []
    for _ in range((count + 63) // 64):
        word = bits & 0xFFFF_FFFF_FFFF_FFFF
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
        bits >>= 64
    return words


__all__ = ["Dispatcher", "THROTTLE_EVENTS"]
