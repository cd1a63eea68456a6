"""The transaction coordinator's records in the metadata plane: reads, conditional writes, the CAS retry.

One record per Kafka transactional id or Pulsar transaction (``records.py``), a pid index
entry per producer id it gave out, and the ``ACTIVE_INDEX`` secondary index that the
background passes scan by state and deadline.
"""

from __future__ import annotations

import builtins
from typing import Callable, Iterable

from ..meta import EXPECT_ABSENT, MetadataStore, cas
from .errors import ConcurrentTransactions, InvalidProducerIdMapping, TransactionNotFound
from .records import ACTIVE_INDEX, TxnRecord, TxnState, pid_key, record_key, records_range

MAX_ATTEMPTS = 100


class RecordStore:
    """Reads and compare-and-set writes of transaction records (the coordinator's lowest part)."""

    meta: MetadataStore
    clock: Callable[[], float]

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

    async def _retry(self, key: str, step):
        """``step()`` again until its write wins (ConcurrentTransactions when it never does)."""
        return await cas.retry(step, max_attempts=MAX_ATTEMPTS,
                               exhausted=lambda: ConcurrentTransactions(f"{key}: too many concurrent changes"))

    async def _forget_pid(self, *pids: int) -> None:
        """Delete the pid index entries of ``pids`` (negative ones: none)."""
        for pid in pids:
            if pid >= 0:
                await self.meta.delete(pid_key(pid))

    @staticmethod
    def _not_found(key: str) -> Exception:
        if key.startswith("pulsar:"):
            return TransactionNotFound(f"transaction {key[len('pulsar:'):]} does not exist")
        return InvalidProducerIdMapping(f"no transaction state for {key!r}")

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


__all__ = ["MAX_ATTEMPTS", "RecordStore"]
