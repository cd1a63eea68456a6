"""The coordinator's background passes: timeouts, recovery and clean-ups, every ``interval`` seconds.

Any broker's pass may act on any record (each change is a CAS): it aborts ONGOING
transactions past their timeout, completes PREPARE_* ones a dead coordinator left,
forgets finished Pulsar transactions and idle Kafka transactional ids (and pid index
entries nothing names), and aborts open records of the stream index that no live
transaction accounts for.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..meta import UnexpectedVersion
from ..storage import view as stream_view
from .completion import Completion
from .records import PID_ROOT, TxnRecord, TxnState, record_key, records_range
from .stream_index import StreamTransactions

log = logging.getLogger(__name__)

S = TxnState
EXPIRATION_CHECK_MS = 60_000  # how often the loop looks for idle transactional ids (a scan of every record)


class Housekeeping(Completion):
    """The passes ``start`` runs until ``close``; each is also callable on its own."""

    stream_txns: StreamTransactions | None
    pulsar_retention_ms: int
    stale_open_grace_ms: int
    transactional_id_expiration_ms: int
    orphan_pid_grace_ms: int
    _last_expiration_check_ms: int
    _task: asyncio.Task | None
    _follow_task: asyncio.Task | None

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
            running = self._completing.get(rec.key)
            if running is not None and not running.done():
                continue  # this broker is completing it already
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
                                                           else item.epoch, False, sequence=item.sequence)
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


__all__ = ["EXPIRATION_CHECK_MS", "Housekeeping"]
