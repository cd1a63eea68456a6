"""The transaction coordinator: one protocol-neutral state machine over records in the metadata plane.

Every transition is a compare-and-set on the record's version, so any number of
brokers may act on the same transaction: exactly one wins each transition and the
others re-read. The PREPARE_* write is the decision: it is durable before any
marker is written, and whoever finds a PREPARE_* record (the broker that wrote it,
``recover`` on any broker after a crash) completes it; every participant step is
idempotent. Producer epochs fence zombies: a re-initialisation or a timeout bumps the
epoch, and the abort markers of the old transaction carry the new one.

This module holds the transitions clients ask for; the record reads and writes are
``record_store.py``, the completion of decisions ``completion.py`` and the background
passes (timeouts, recovery, clean-ups) ``housekeeping.py``.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from typing import Callable, Iterable

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ..meta.cas import ReadAgain
from .errors import (ConcurrentTransactions, InvalidProducerIdMapping, InvalidTransactionTimeout, InvalidTxnState,
                     ProducerFenced, TransactionNotFound)
from .housekeeping import EXPIRATION_CHECK_MS, Housekeeping
from .participants import Participants
from .producer_ids import ProducerIds
from .records import MAX_EPOCH, TxnRecord, TxnState, kafka_key, pid_key, pulsar_key
from .stream_index import StreamTransactions

S = TxnState
DEFAULT_MAX_TIMEOUT_MS = 15 * 60 * 1000  # Kafka's transaction.max.timeout.ms
PULSAR_RETENTION_MS = 60 * 60 * 1000  # a finished Pulsar transaction is remembered this long (retried END_TXN)
STALE_OPEN_GRACE_MS = 30_000
TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms
# A pid index entry is written just before the record naming it: one younger than this is never taken for
# an orphan (far above that gap, even on a stalled metadata plane).
ORPHAN_PID_GRACE_MS = 10 * 60 * 1000


class TransactionCoordinator(Housekeeping):
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

    # -- checks ----------------------------------------------------------------------------
    def _check_timeout(self, timeout_ms: int) -> None:
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise InvalidTransactionTimeout(f"transaction timeout {timeout_ms} ms is not in (0, "
                                            f"{self.max_timeout_ms}] ms")

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
                            groups=_merge([], groups), subscriptions=_merge([], subscriptions),
                            sequence=rec.sequence + 1)
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


def _merge(old: Iterable, new: Iterable) -> builtins.list:
    out = builtins.list(old)
    for item in new:
        if item not in out:
            out.append(item)
    return out


__all__ = ["DEFAULT_MAX_TIMEOUT_MS", "EXPIRATION_CHECK_MS", "ORPHAN_PID_GRACE_MS", "PULSAR_RETENTION_MS",
           "STALE_OPEN_GRACE_MS", "TRANSACTIONAL_ID_EXPIRATION_MS", "TransactionCoordinator"]
