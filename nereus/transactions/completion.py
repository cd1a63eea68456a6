"""Completing decided transactions: every participant, then the COMPLETE_* write.

A PREPARE_* record is the decision. Whoever finds one completes it: the participants'
markers and completers run (``participants.py``; each step idempotent), then one CAS
moves the record to COMPLETE_* if nobody moved it meanwhile. A completion runs now
(``end``), soon in the background (``end(wait=False)``, retried briefly while another
broker's partitions still miss their markers), or on the decision of another broker's
coordinator as soon as it is recorded (``follow_decisions``).
"""

from __future__ import annotations

import asyncio
import logging
import random

from ..meta import NotificationType, UnexpectedVersion
from ..tasks import spawn
from .participants import Participants
from .record_store import RecordStore
from .records import MAX_EPOCH, TxnRecord, TxnState, records_range

log = logging.getLogger(__name__)

S = TxnState


class Completion(RecordStore):
    """Completion of PREPARE_* records, and aborts (which decide and complete at once)."""

    participants: Participants
    interval: float
    _completing: dict[str, asyncio.Task]
    _following: set[asyncio.Task]
    _follows: bool

    async def _complete(self, rec: TxnRecord) -> TxnRecord:
        """Run every participant of a PREPARE_* record, then CAS it to COMPLETE_* (if still the same)."""
        commit = rec.state == S.PREPARE_COMMIT
        pid, epoch = rec.producer_id, rec.producer_epoch
        seq = rec.sequence
        steps = [self.participants.complete_partition(p, pid, epoch, commit, sequence=seq) for p in rec.partitions]
        steps += [self.participants.complete_group(g, pid, epoch, commit, sequence=seq) for g in rec.groups]
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

    async def settle(self, key: str, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for a completion ``end(wait=False)`` left running for ``key``."""
        task = self._completing.get(key)
        if task is not None:
            await asyncio.wait([task], timeout=timeout)

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


__all__ = ["Completion"]
