"""A WAL writer's side of its replicas: ensembles without the replicas that just failed, an
object's write to its write set, the probe of a full WAL, and telling replicas a block is done."""

from __future__ import annotations

import asyncio
import logging
import time

from . import wal_replicas
from .wal_blocks import NameBlock
from .wal_replicas import Durability, ReplicaDirectory

log = logging.getLogger(__name__)

#: A WAL replica that failed a write is left out of new ensembles for this long.
AVOID_FAILED_REPLICA_SECONDS = 30.0


def object_index(key: str, block: NameBlock) -> int:
    """Object ``key``'s place in its block (its name ends with its sequence number)."""
    return block.index(int(key[-10:]))


class ReplicaWrites:
    """Writes of one WAL writer to the replicas of ``directory``, with ``durability``'s quorums."""

    def __init__(self, durability: Durability, directory: ReplicaDirectory, node_id: str):
        self.durability = durability
        self.directory = directory
        self.node_id = node_id
        self.background: set[asyncio.Task] = set()  # writes of the replicas slower than the ack quorum
        self._avoid: dict[str, float] = {}  # replica -> until when new ensembles leave it out

    def write_set(self, key: str, block: NameBlock) -> list[str]:
        return wal_replicas.write_set(block.ensemble, block.write_quorum, object_index(key, block))

    async def write(self, key: str, block: NameBlock, chunks: list) -> list[str]:
        """Put the object on its write set (see ``wal_replicas.write``); returns the replicas that did not
        take it though the ack quorum did. A replica that failed is left out of new ensembles for a while."""
        replicas = self.write_set(key, block)
        try:
            slow = await wal_replicas.write(self.directory, replicas, block.ack_quorum, block.marker, key, chunks,
                                            background=self.background)
        except Exception:
            self.avoid_for_a_while(replicas)
            raise
        self.avoid_for_a_while(slow)
        return slow

    def avoid_for_a_while(self, replicas) -> None:
        until = time.monotonic() + AVOID_FAILED_REPLICA_SECONDS
        for replica_id in replicas:
            self._avoid[replica_id] = until

    def choose_ensemble(self, avoid: tuple[str, ...]) -> list[str]:
        now = time.monotonic()
        for replica_id in [r for r, until in self._avoid.items() if until < now]:
            del self._avoid[replica_id]
        d = self.durability
        return wal_replicas.choose_ensemble(self.directory, d.ensemble, d.ack_quorum, avoid + tuple(self._avoid))

    async def probe(self, size: int) -> None:
        """Write ``size`` bytes to an ack quorum of replicas and drop them: raises while too few take it."""
        d = self.durability
        ensemble = wal_replicas.choose_ensemble(self.directory, d.ensemble, d.ack_quorum, ())
        block = f"/nereus/probe/{self.node_id}/{time.time_ns()}"
        try:
            await wal_replicas.write(self.directory, wal_replicas.write_set(ensemble, d.write_quorum, 0),
                                     d.ack_quorum, block, "probe", bytes(size), background=self.background)
        finally:
            await asyncio.gather(*(self.drop(replica_id, block) for replica_id in ensemble))

    async def drop(self, replica_id: str, block: str) -> None:
        """Tell a replica it may forget ``block`` (its janitor does it anyway once the marker is gone)."""
        replica = self.directory.replica(replica_id)
        if replica is None:
            return
        try:
            await replica.drop(block)
        except Exception as exc:
            log.debug("dropping block %s on WAL replica %s failed: %s", block, replica_id, exc)

    async def close(self) -> None:
        await asyncio.gather(*self.background, return_exceptions=True)


__all__ = ["AVOID_FAILED_REPLICA_SECONDS", "ReplicaWrites", "object_index"]
