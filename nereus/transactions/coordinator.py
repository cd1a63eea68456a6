"""The transaction coordinator: one protocol-neutral state machine over records in the metadata plane.

Every transition is a compare-and-set on the record's version, so any number of
brokers may act on the same transaction: exactly one wins each transition and the
others re-read. The PREPARE_* write is the decision: it is durable before any
marker is written, and whoever finds a PREPARE_* record (the broker that wrote it,
``recover`` on any broker after a crash) completes it; every participant step is
idempotent. Producer epochs fence zombies: a re-initialisation or a timeout bumps the
epoch, and the abort markers of the old transaction carry the new one.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import random
import time
from typing import Callable, Iterable

from ..meta import EXPECT_ABSENT, MetadataStore, NotificationType, UnexpectedVersion, cas
from ..meta.cas import ReadAgain
from ..storage import view as stream_view
from ..tasks import spawn
from .errors import (ConcurrentTransactions, InvalidProducerIdMapping, InvalidTransactionTimeout, InvalidTxnState,
                     ProducerFenced, TransactionNotFound)
from .participants import Participants
from .producer_ids import ProducerIds
from .records import (ACTIVE_INDEX, MAX_EPOCH, PID_ROOT, TxnRecord, TxnState, kafka_key, pid_key, pulsar_key,
                      record_key, records_range)
from .stream_index import StreamTransactions

log = logging.getLogger(__name__)

S = TxnState
DEFAULT_MAX_TIMEOUT_MS = 15 * 60 * 1000  # Kafka's transaction.max.timeout.ms
PULSAR_RETENTION_MS = 60 * 60 * 1000  # a finished Pulsar transaction is remembered this long (retried END_TXN)
STALE_OPEN_GRACE_MS = 30_000
TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms
EXPIRATION_CHECK_MS = 60_000  # how often the loop looks for idle transactional ids (a scan of every record)
# A pid index entry is written just before the record naming it: one younger than this is never taken for
# an orphan (far above that gap, even on a stalled metadata plane).
ORPHAN_PID_GRACE_MS = 10 * 60 * 1000
MAX_ATTEMPTS = 100


class TransactionCoordinator:
    """Kafka transactional ids and Pulsar transactions, their state records and their completion."""

    def __init__(self, meta: MetadataStore, producer_ids: ProducerIds, participants: Participants, *,
                 clock: Callable[[], float] = time.time, interval: float = 1.0,
                 max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS, tc_id: int = 0,
                 stream_txns: StreamTransactions | None = None, pulsar_retention_ms: int = PULSAR_RETENTION_MS,
                 stale_open_grace_ms: int = STALE_OPEN_GRACE_MS,
                 transactional_id_expiration_ms: int = TRANSACTIONAL_ID_EXPIRATION_MS) -> None:
        self.meta = meta
        self.producer_ids = producer_ids
        self.participants = participants
        self.clock = clock
        self.interval = interval
        self.max_timeout_ms = max_timeout_ms
        self.tc_id = tc_id  # Pulsar's TxnID most significant bits
        self.stream_txns = stream_txns  # when given, the loop also closes stale open records of it
        self._completing: dict[str, asyncio.Task] = {}  # key -> the completion ``end(wait=False)`` left running
        self.pulsar_retention_ms = pulsar_retention_ms
        self.stale_open_grace_ms = stale_open_grace_ms
        self.transactional_id_expiration_ms = transactional_id_expiration_ms
        self._last_expiration_check_ms = -EXPIRATION_CHECK_MS
        self.orphan_pid_grace_ms = ORPHAN_PID_GRACE_MS
        self._task: asyncio.Task | None = None
        self._follows = False
        self._follow_task: asyncio.Task | None = None
        self._following: set[asyncio.Task] = set()

    # -- records ---------------------------------------------------------------------------
    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    async def _get(self, key: str) -> tuple[TxnRecord | None, int]:
        rec = await self.meta.get(record_key(key))
        if rec is None:
            return None, EXPECT_ABSENT
        return TxnRecord.from_json(rec.value), rec.version.version_id

    async def _put(self, rec: TxnRecord, version: int) -> None:
        """Write ``rec`` if the stored version is still ``version``; raises UnexpectedVersion."""
        await self.meta.put(record_key(rec.key), rec.to_json(), expected_version_id=version,
                            secondary_indexes=rec.active_index())

    def _check_timeout(self, timeout_ms: int) -> None:
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeout(f"transaction timeout {timeout_ms} ms is not in (0, "
                                            f"{self.max_timeout_ms}] ms")

    @staticmethod
    def _not_found(key: str) -> Exception:
        if key.startswith("pulsar:"):
            return TransactionNotFound(f"transaction {key[len('pulsar:'):]} does not exist")
        return InvalidProducerIdMapping(f"no transaction state for {key!r}")

    @staticmethod
    def _check_producer(rec: TxnRecord, pid: int, epoch: int) -> None:
        if pid != rec.producer_id:
            if rec.is_pulsar:
                raise TransactionNotFound(f"transaction {rec.key} has producer id {rec.producer_id}, not {pid}")
            raise InvalidProducerIdMapping(f"{rec.key} has producer id {rec.producer_id}, not {pid}")
        if epoch != rec.producer_epoch:
            raise ProducerFenced(f"{rec.key}: epoch {epoch} is not the current epoch {rec.producer_epoch}")

    # -- producers -------------------------------------------------------------------------
    async def init_producer(self, transactional_id: str, timeout_ms: int, producer_id: int = -1,
                            producer_epoch: int = -1) -> tuple[int, int]:
        """Kafka InitProducerId with a transactional id: (producer id, epoch) of a fresh or bumped producer.

        An ongoing transaction of the old epoch is aborted first (its markers carry the
        new epoch, fencing the zombie); a PREPARE_* one is completed first. With
        ``producer_id``/``producer_epoch`` (KIP-360) they must match the record.
        """
        self._check_timeout(timeout_ms)
        key = kafka_key(transactional_id)
        return await self._retry(key, lambda: self._init_step(key, timeout_ms, producer_id, producer_epoch))

    async def _init_step(self, key: str, timeout_ms: int, producer_id: int, producer_epoch: int) -> tuple[int, int]:
        """One read-decide-write of ``init_producer``."""
        rec, version = await self._get(key)
        now = self.now_ms()
        if rec is None:
            pid = await self.producer_ids.allocate()
            await self.meta.put(pid_key(pid), key.encode())
            try:
                await self._put(TxnRecord(key, pid, 0, S.EMPTY, timeout_ms, update_ms=now), EXPECT_ABSENT)
            except UnexpectedVersion:
                await self._forget_pid(pid)  # another broker's init won: this pid was never given out
                raise
            return pid, 0
        if producer_id >= 0 and producer_id == rec.previous_producer_id and rec.producer_epoch == 0 \
                and producer_epoch == MAX_EPOCH - 1 and rec.state == S.EMPTY:
            return rec.producer_id, rec.producer_epoch  # a retry of the request that exhausted the epoch
        if producer_id >= 0:
            if producer_id != rec.producer_id or producer_epoch not in (rec.producer_epoch,
                                                                        rec.last_producer_epoch):
                raise ProducerFenced(f"{key}: producer {producer_id} epoch {producer_epoch} is not current "
                                     f"({rec.producer_id} epoch {rec.producer_epoch})")
            if producer_epoch != rec.producer_epoch and rec.state in (S.EMPTY, S.COMPLETE_ABORT,
                                                                      S.COMPLETE_COMMIT):
                return rec.producer_id, rec.producer_epoch  # bumped already (by a retry or a timeout)
        if rec.state.prepared:
            await self._complete(rec)
            raise ReadAgain
        if rec.state in (S.ONGOING, S.PREPARE_EPOCH_FENCE):
            await self._abort(rec, version, bump=True)
            raise ReadAgain
        pid, epoch, previous = rec.producer_id, rec.producer_epoch + 1, rec.previous_producer_id
        if epoch >= MAX_EPOCH:
            pid, epoch, previous = await self.producer_ids.allocate(), 0, rec.producer_id
            await self.meta.put(pid_key(pid), key.encode())
        new = rec.with_(producer_id=pid, producer_epoch=epoch, state=S.EMPTY, timeout_ms=timeout_ms,
                        start_ms=-1, update_ms=now, partitions=[], groups=[], subscriptions=[],
                        last_producer_epoch=rec.producer_epoch if pid == rec.producer_id else -1,
                        previous_producer_id=previous)
        try:
            await self._put(new, version)
        except UnexpectedVersion:
            if pid != rec.producer_id:
                await self._forget_pid(pid)
            raise
        if previous != rec.previous_producer_id:
            # The id given up one exhaustion earlier (2 * 32767 epochs ago) is now garbage; the one
            # just given up keeps its entry, so its zombie still reads as fenced, not unknown.
            await self._forget_pid(rec.previous_producer_id)
        return pid, epoch

    async def _retry(self, key: str, step):
        """``step()`` again until its write wins (ConcurrentTransactions when it never does)."""
        return await cas.retry(step, max_attempts=MAX_ATTEMPTS,
                               exhausted=lambda: ConcurrentTransactions(f"{key}: too many concurrent changes"))

    async def new_txn(self, timeout_ms: int, owner: str | None = None) -> int:
        """Pulsar NEW_TXN: a fresh producer id (the TxnID's least bits) with an ONGOING record
        (``owner``: the client's role, kept for the ownership checks of the protocol layer)."""
        self._check_timeout(timeout_ms)
        pid = await self.producer_ids.allocate()
        key = pulsar_key(self.tc_id, pid)
        await self.meta.put(pid_key(pid), key.encode())
        now = self.now_ms()
        await self._put(TxnRecord(key, pid, 0, S.ONGOING, timeout_ms, start_ms=now, update_ms=now, owner=owner),
                        EXPECT_ABSENT)
        return pid

    async def _forget_pid(self, *pids: int) -> None:
        """Delete the pid index entries of ``pids`` (negative ones: none)."""
        for pid in pids:
            if pid >= 0:
                await self.meta.delete(pid_key(pid))

    # -- membership --------------------------------------------------------------------------
    async def add_partitions(self, key: str, pid: int, epoch: int, partitions: Iterable[str]) -> None:
        """Add partitions (full topic names) to the transaction: EMPTY/COMPLETE_* -> ONGOING."""
        await self._add(key, pid, epoch, partitions=builtins.list(partitions))

    async def add_groups(self, key: str, pid: int, epoch: int, group: str) -> None:
        """Kafka AddOffsetsToTxn: the group's offsets are completed with the transaction."""
        await self._add(key, pid, epoch, groups=[group])

    async def add_subscriptions(self, key: str, pid: int, epoch: int,
                                subscriptions: Iterable[tuple[str, str]]) -> None:
        """Pulsar ADD_SUBSCRIPTION_TO_TXN: (topic, subscription) pairs whose acks wait for the outcome."""
        await self._add(key, pid, epoch, subscriptions=[tuple(s) for s in subscriptions])

    async def _add(self, key: str, pid: int, epoch: int, *, partitions=(), groups=(), subscriptions=()) -> None:
        await self._retry(key, lambda: self._add_step(key, pid, epoch, partitions, groups, subscriptions))

    async def _add_step(self, key: str, pid: int, epoch: int, partitions, groups, subscriptions) -> None:
        rec, version = await self._get(key)
        if rec is None:
            raise self._not_found(key)
        self._check_producer(rec, pid, epoch)
        if rec.state.prepared or rec.state == S.PREPARE_EPOCH_FENCE:
            raise ConcurrentTransactions(f"{key}: the previous transaction is still completing")
        now = self.now_ms()
        if rec.state == S.ONGOING:
            new = rec.with_(partitions=_merge(rec.partitions, partitions), groups=_merge(rec.groups, groups),
                            subscriptions=_merge(rec.subscriptions, subscriptions), update_ms=now)
            if new == rec.with_(update_ms=now):
                return  # nothing new
        elif rec.is_pulsar or rec.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            raise InvalidTxnState(f"{key} is {rec.state.value}: nothing can be added")
        else:
            new = rec.with_(state=S.ONGOING, start_ms=now, update_ms=now, partitions=_merge([], partitions),
                            groups=_merge([], groups), subscriptions=_merge([], subscriptions))
        await self._put(new, version)

    # -- outcome ---------------------------------------------------------------------------
    async def end(self, key: str, pid: int, epoch: int, commit: bool, *, wait: bool = True) -> TxnRecord:
        """Commit or abort: PREPARE_* (the decision), every participant, then COMPLETE_*.

        A retried end of a completed transaction with the same outcome succeeds; the
        opposite outcome raises InvalidTxnState. If a participant cannot complete now
        (e.g. another broker owns a partition) the decision stands and ``recover``
        finishes it; the returned record then is still PREPARE_*. ``wait=False``
        returns once the decision is durable and completes in the background, as a
        Kafka coordinator answers EndTxn (``settle`` waits for that completion).
        """
        return await self._retry(key, lambda: self._end_step(key, pid, epoch, commit, wait))

    async def _end_step(self, key: str, pid: int, epoch: int, commit: bool, wait: bool) -> TxnRecord:
        prepare = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        complete = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        rec, version = await self._get(key)
        if rec is None:
            raise self._not_found(key)
        if epoch != rec.producer_epoch and pid == rec.producer_id and epoch == rec.last_producer_epoch \
                and not commit and rec.state in (S.PREPARE_ABORT, S.COMPLETE_ABORT):
            # The coordinator aborted it with an epoch bump (timeout): the producer's abort agrees.
            return await self._complete(rec) if rec.state.prepared else rec
        self._check_producer(rec, pid, epoch)
        if rec.state == S.ONGOING:
            new = rec.with_(state=prepare, update_ms=self.now_ms())
            await self._put(new, version)
            return await self._complete(new) if wait else self._complete_later(new)
        if rec.state == prepare:
            return await self._complete(rec) if wait else self._complete_later(rec)
        if rec.state == complete:
            return rec
        if rec.state == S.PREPARE_EPOCH_FENCE:
            raise ConcurrentTransactions(f"{key} is being fenced")
        raise InvalidTxnState(f"cannot {'commit' if commit else 'abort'} {key}: it is {rec.state.value}")

    def _complete_later(self, rec: TxnRecord) -> TxnRecord:
        task = self._completing.get(rec.key)
        if task is None or task.done():
            task = self._completing[rec.key] = asyncio.ensure_future(self._complete_soon(rec))

            def done(t: asyncio.Task, key: str = rec.key) -> None:
                if self._completing.get(key) is t:
                    del self._completing[key]
                if not t.cancelled() and t.exception() is not None:  # the decision stands: recovery finishes it
                    log.warning("%s: completion failed (%s); retried later", key, t.exception())

            task.add_done_callback(done)
        return rec

    async def settle(self, key: str, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for a completion ``end(wait=False)`` left running for ``key``."""
        task = self._completing.get(key)
        if task is not None:
            await asyncio.wait([task], timeout=timeout)

    async def _complete_soon(self, rec: TxnRecord) -> TxnRecord:
        """``_complete``, tried again a few times within about ``interval`` while participants
        are missing: the markers of another broker's partitions may be written by that broker
        (``follow_decisions``) a moment later, and then the record can be closed at once."""
        delay = 0.02
        while True:
            done = await self._complete(rec)
            if not done.state.prepared or delay > self.interval:
                return done
            await asyncio.sleep(delay)
            delay *= 2
            cur, _ = await self._get(rec.key)
            if cur is None or cur.state != rec.state or cur.producer_id != rec.producer_id \
                    or cur.producer_epoch != rec.producer_epoch:
                return cur or rec  # completed (or moved on) meanwhile
            rec = cur

    def follow_decisions(self) -> None:
        """Complete the transactions other brokers' coordinators decide as soon as their
        decision is recorded (change notifications), not at this broker's next recovery: for
        brokers whose partitions cannot be sent markers by another broker (no remote marker
        writer). Runs from ``start`` to ``close``."""
        self._follows = True

    async def _follow(self) -> None:
        lo, hi = records_range()
        delay = 0.05
        while True:
            try:
                async with self.meta.notifications() as stream:
                    delay = 0.05
                    async for note in stream:
                        if lo <= note.key < hi and note.type in (NotificationType.KEY_CREATED,
                                                                  NotificationType.KEY_MODIFIED):
                            spawn(self._follow_record(note.key), "following a transaction decision", self._following)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("transaction decisions: notifications broke (%s: %s); subscribing again",
                            type(exc).__name__, exc)
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self.interval)

    async def _follow_record(self, stored_key: str) -> None:
        stored = await self.meta.get(stored_key)
        if stored is not None:
            rec = TxnRecord.from_json(stored.value)
            if rec.state.prepared:
                self._complete_later(rec)

    async def _abort(self, rec: TxnRecord, version: int, *, bump: bool) -> TxnRecord | None:
        """ONGOING -> PREPARE_ABORT (with an epoch bump that fences the producer) -> COMPLETE_ABORT."""
        epoch = rec.producer_epoch + 1 if bump and rec.producer_epoch + 1 < MAX_EPOCH else rec.producer_epoch
        new = rec.with_(state=S.PREPARE_ABORT, producer_epoch=epoch, update_ms=self.now_ms(),
                        last_producer_epoch=rec.producer_epoch if epoch != rec.producer_epoch
                        else rec.last_producer_epoch)
        try:
            await self._put(new, version)
        except UnexpectedVersion:
            return None  # someone else moved it on: the caller re-reads
        return await self._complete(new)

    async def _complete(self, rec: TxnRecord) -> TxnRecord:
        """Run every participant of a PREPARE_* record, then CAS it to COMPLETE_* (if still the same)."""
        commit = rec.state == S.PREPARE_COMMIT
        pid, epoch = rec.producer_id, rec.producer_epoch
        steps = [self.participants.complete_partition(p, pid, epoch, commit) for p in rec.partitions]
        steps += [self.participants.complete_group(g, pid, epoch, commit) for g in rec.groups]
        steps += [self.participants.complete_subscription(t, s, pid, commit) for t, s in rec.subscriptions]
        results = await asyncio.gather(*steps, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            log.warning("%s: %d of %d participant(s) not completed yet (%s: %s); retried later", rec.key,
                        len(failed), len(steps), type(failed[0]).__name__, failed[0])
            return rec
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT

        async def settle() -> TxnRecord:
            cur, version = await self._get(rec.key)
            if cur is None or cur.state != rec.state or cur.producer_id != pid or cur.producer_epoch != epoch:
                return cur or rec  # completed (or moved on) by someone else
            new = cur.with_(state=done, update_ms=self.now_ms(), partitions=[], groups=[], subscriptions=[])
            await self._put(new, version)
            log.info("%s: transaction of producer %d epoch %d %s", rec.key, pid, epoch,
                     "committed" if commit else "aborted")
            return new

        return await self._retry(rec.key, settle)

    # -- partition leaders ----------------------------------------------------------------------
    async def verify(self, pid: int, epoch: int, partition: str) -> TxnRecord:
        """A partition's check before the first transactional append of (pid, epoch) to it.

        Raises ProducerFenced (another epoch or producer id is current),
        InvalidProducerIdMapping (unknown pid) or InvalidTxnState (not ONGOING, or the
        partition was not added).
        """
        rec = await self.find_by_pid(pid)
        if rec is None:
            raise InvalidProducerIdMapping(f"producer id {pid} has no transaction")
        if rec.producer_id != pid or rec.producer_epoch != epoch:
            raise ProducerFenced(f"producer {pid} epoch {epoch} is fenced by {rec.producer_id} epoch "
                                 f"{rec.producer_epoch}")
        if rec.state != S.ONGOING or partition not in rec.partitions:
            raise InvalidTxnState(f"{partition} is not part of an ongoing transaction of producer {pid} "
                                  f"({rec.state.value})")
        return rec

    # -- reads ---------------------------------------------------------------------------------
    async def describe(self, key: str) -> TxnRecord | None:
        return (await self._get(key))[0]

    async def find_by_pid(self, pid: int) -> TxnRecord | None:
        """The record that gave out ``pid`` (it may have moved on to another pid since)."""
        rec = await self.meta.get(pid_key(pid))
        return None if rec is None else await self.describe(rec.value.decode())

    async def list(self, states: Iterable[TxnState] = (), pids: Iterable[int] = ()) -> builtins.list[TxnRecord]:
        """Every record, or those in one of ``states`` / with one of ``pids``."""
        wanted_states, wanted_pids = set(states), set(pids)
        lo, hi = records_range()
        out = []
        async for stored in self.meta.range_scan(lo, hi):
            rec = TxnRecord.from_json(stored.value)
            if (not wanted_states or rec.state in wanted_states) and (not wanted_pids or rec.producer_id in
                                                                      wanted_pids):
                out.append(rec)
        return out

    async def _active(self, lo: str, hi: str) -> builtins.list[tuple[TxnRecord, int]]:
        out = []
        async for stored in self.meta.range_scan(lo, hi, use_index=ACTIVE_INDEX):
            out.append((TxnRecord.from_json(stored.value), stored.version.version_id))
        return out

    # -- background work -----------------------------------------------------------------------
    async def abort_expired(self) -> int:
        """Abort every ONGOING transaction older than its timeout (Kafka's get an epoch bump); their count."""
        now = self.now_ms()
        aborted = 0
        for rec, version in await self._active("ONGOING-", f"ONGOING-{now + 1:020d}"):
            if rec.state != S.ONGOING or rec.deadline_ms > now:
                continue
            log.info("%s: transaction of producer %d timed out after %d ms: aborting", rec.key, rec.producer_id,
                     rec.timeout_ms)
            if await self._abort(rec, version, bump=not rec.is_pulsar) is not None:
                aborted += 1
        return aborted

    async def recover(self) -> int:
        """Complete every PREPARE_* transaction (a coordinator died mid-commit); the count completed."""
        done = 0
        for rec, _ in await self._active("PREPARE-", "PREPARE-\U0010ffff"):
            if rec.state.prepared and (await self._complete(rec)).state.completed:
                done += 1
        return done

    async def forget_finished(self) -> int:
        """Delete Pulsar transactions finished more than ``pulsar_retention_ms`` ago; their count."""
        cutoff = self.now_ms() - self.pulsar_retention_ms
        forgotten = 0
        for rec, version in await self._active("DONE-", f"DONE-{max(cutoff, 0):020d}"):
            if not rec.state.completed or rec.update_ms > cutoff:
                continue
            try:
                await self.meta.delete(record_key(rec.key), expected_version_id=version)
            except UnexpectedVersion:
                continue
            await self._forget_pid(rec.producer_id)
            forgotten += 1
        return forgotten

    async def expire_transactional_ids(self) -> int:
        """Delete the records of Kafka transactional ids idle for ``transactional_id_expiration_ms``
        (no transaction ongoing or completing); their count. The id's next InitProducerId
        starts afresh with a new producer id, as after Kafka's expiration."""
        cutoff = self.now_ms() - self.transactional_id_expiration_ms
        self._last_expiration_check_ms = self.now_ms()
        expired = 0
        referenced: set[int] = set()
        lo, hi = records_range()
        async for stored in self.meta.range_scan(lo, hi):
            rec = TxnRecord.from_json(stored.value)
            if rec.is_pulsar or rec.state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT) \
                    or rec.update_ms > cutoff:
                referenced.update((rec.producer_id, rec.previous_producer_id))
                continue
            try:
                await self.meta.delete(record_key(rec.key), expected_version_id=stored.version.version_id)
            except UnexpectedVersion:
                referenced.update((rec.producer_id, rec.previous_producer_id))  # used meanwhile: still live
                continue
            await self._forget_pid(rec.producer_id, rec.previous_producer_id)
            log.info("%s: transactional id idle for more than %d ms: its producer %d is forgotten", rec.key,
                     self.transactional_id_expiration_ms, rec.producer_id)
            expired += 1
        await self._forget_orphan_pids(referenced)
        return expired

    async def _forget_orphan_pids(self, referenced: set[int]) -> int:
        """Delete pid index entries no record names (left by a broker that died between its two
        writes); their count."""
        cutoff = int(time.time() * 1000) - self.orphan_pid_grace_ms  # the metadata plane's clock
        forgotten = 0
        async for stored in self.meta.range_scan(f"{PID_ROOT}/", f"{PID_ROOT}/~"):
            pid = int(stored.key.rsplit("/", 1)[1])
            if pid in referenced or stored.version.modified_timestamp > cutoff:
                continue
            try:
                await self.meta.delete(stored.key, expected_version_id=stored.version.version_id)
            except UnexpectedVersion:
                continue
            log.info("producer id %d: no transaction record names it any more: its index entry is deleted", pid)
            forgotten += 1
        return forgotten

    async def abort_stale_open(self) -> int:
        """Abort open records of the stream index that no live transaction accounts for; their count.

        Such a record comes from a transactional append that raced its transaction's
        end (a zombie's late request): left alone it would hold the stream's last
        stable offset back forever. Records younger than ``stale_open_grace_ms`` are left.
        """
        if self.stream_txns is None:
            return 0
        now = int(time.time() * 1000)  # compared with the metadata plane's timestamps, not the injected clock
        aborted = 0
        for item in await self.stream_txns.open_transactions():
            if now - item.modified_ms < self.stale_open_grace_ms:
                continue
            name = await stream_view.stream_name(self.meta, item.stream_id)
            if name is None:  # the stream was deleted
                await self.stream_txns.forget_stream(item.stream_id)
                continue
            rec = await self.find_by_pid(item.pid)
            current = rec is not None and rec.producer_id == item.pid
            if current and (rec.state.prepared or rec.state == S.PREPARE_EPOCH_FENCE
                            or (rec.state == S.ONGOING and name in rec.partitions)):
                continue
            log.warning("%s: producer %d has an open transaction no coordinator record accounts for: aborting it",
                        name, item.pid)
            try:
                await self.participants.complete_partition(name, item.pid, rec.producer_epoch if current
                                                           else item.epoch, False)
                aborted += 1
            except Exception as exc:
                log.warning("%s: stale transaction of producer %d not aborted yet: %s", name, item.pid, exc)
        return aborted

    def start(self) -> None:
        """Run ``abort_expired``, ``recover`` and the clean-ups every ``interval`` seconds until ``close``."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="nereus-txn-coordinator")
        if self._follows and self._follow_task is None:
            self._follow_task = asyncio.get_running_loop().create_task(self._follow(), name="nereus-txn-follow")

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.abort_expired()
                await self.recover()
                await self.forget_finished()
                await self.abort_stale_open()
                # At least twice per expiration period, so a short one (in tests) is honoured promptly.
                check_ms = min(EXPIRATION_CHECK_MS, self.transactional_id_expiration_ms // 2)
                if self.now_ms() - self._last_expiration_check_ms >= check_ms:
                    await self.expire_transactional_ids()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator pass failed")

    async def close(self) -> None:
        task, self._task = self._task, None
        follow, self._follow_task = self._follow_task, None
        tasks = [t for t in [task, follow, *self._following, *self._completing.values()] if t is not None]
        self._completing.clear()
        for t in tasks:  # an unfinished completion is finished by recovery (its decision is durable)
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _merge(old: Iterable, new: Iterable) -> builtins.list:
    out = builtins.list(old)
    for item in new:
        if item not in out:
            out.append(item)
    return out


__all__ = ["DEFAULT_MAX_TIMEOUT_MS", "EXPIRATION_CHECK_MS", "ORPHAN_PID_GRACE_MS", "PULSAR_RETENTION_MS",
           "STALE_OPEN_GRACE_MS", "TRANSACTIONAL_ID_EXPIRATION_MS", "TransactionCoordinator"]
