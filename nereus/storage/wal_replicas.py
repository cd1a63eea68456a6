"""The WAL replicas of a block: who holds its objects, and quorum writes, reads and fences.

In the ``replicated`` and ``local`` profiles a flush's object goes to the WALs on
brokers' disks (``nereus.wal``) before it reaches the object store. Each block of
object names (``wal_blocks``) has an ENSEMBLE of ``E`` replicas, chosen when the block
is reserved and recorded in its pending marker, so every process can find them.
Object ``i`` of the block (its name's sequence minus the block's first) goes to the
``W`` replicas ``ensemble[(i + j) % E]`` (BookKeeper's striping; ``E == W`` puts every
object on every replica) and is acknowledged once ``A`` of them have it on disk.

Replicas are named by their disk's id, not the broker's: a restarted broker serves
the WAL it left, and a marker keeps naming the right disk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..wal.errors import BlockFenced, EntryNotFound, WalError, WalFull
from .errors import StorageError

log = logging.getLogger(__name__)

OBJECT = "object"
REPLICATED = "replicated"
LOCAL = "local"
PROFILES = (OBJECT, REPLICATED, LOCAL)


class WalUnavailable(StorageError):
    """Fewer than the ack quorum of WAL replicas could take (or fence, or serve) an object."""


@dataclass(frozen=True, slots=True)
class Durability:
    """Where acknowledged appends live before their object is uploaded (Pulsar's
    persistence policy: ensemble, write quorum, ack quorum)."""

    profile: str = OBJECT
    ensemble: int = 1
    write_quorum: int = 1
    ack_quorum: int = 1

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise ValueError(f"WAL profile must be one of {', '.join(PROFILES)}, not {self.profile!r}")
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble:
            raise ValueError("persistence needs 1 <= ackQuorum <= writeQuorum <= ensemble, got "
                             f"{self.ack_quorum} <= {self.write_quorum} <= {self.ensemble}")
        if self.profile == LOCAL and self.ensemble != 1:
            raise ValueError("the local WAL profile keeps one copy (ensemble, write and ack quorum 1)")

    @property
    def on_replicas(self) -> bool:
        return self.profile != OBJECT

    @classmethod
    def local(cls) -> "Durability":
        return cls(LOCAL, 1, 1, 1)


OBJECT_STORE = Durability()


class WalReplica(Protocol):
    """One broker's WAL (a client of its service, or this process's own store)."""

    async def append(self, block: str, key: str, data: bytes | memoryview | list) -> None: ...
    async def read(self, key: str, start: int = 0, end: int | None = None) -> bytes: ...
    async def fence(self, block: str) -> list[str]: ...
    async def drop(self, block: str) -> None: ...


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    replica_id: str
    zone: str = ""


class ReplicaDirectory(Protocol):
    """The WAL replicas this process can use (the broker registry provides them)."""

    def local_id(self) -> str | None:
        """This process's own replica, if it runs one."""

    def live(self) -> list[ReplicaInfo]:
        """Replicas that may take writes now."""

    def replica(self, replica_id: str) -> WalReplica | None:
        """A handle on a replica (live or not: a restarted one may still answer), None if unknown."""

    async def prepare(self, replica_ids: Sequence[str]) -> None:
        """Learn what ``replica`` needs about these replicas before they are read from."""


def choose_ensemble(directory: ReplicaDirectory, size: int, minimum: int,
                    avoid: Sequence[str] = ()) -> list[str]:
    """``size`` live replicas, this process's own first, then one per zone in turn.

    Fewer (but at least ``minimum``) when fewer are live; replicas in ``avoid`` (that
    just failed) only when nothing else is left. Raises WalUnavailable below ``minimum``.
    """
    live = directory.live()
    local = directory.local_id()
    fresh = [r for r in live if r.replica_id not in avoid]
    spare = [r for r in live if r.replica_id in avoid]
    chosen: list[ReplicaInfo] = []
    for pool in (fresh, spare):
        pool = sorted(pool, key=lambda r: (r.replica_id != local, r.replica_id))
        zones_used = {r.zone for r in chosen}
        # Round-robin over zones: a second replica in a zone only once every zone has one.
        while pool and len(chosen) < size:
            pick = next((r for r in pool if r.zone not in zones_used), None)
            if pick is None:
                zones_used = set()
                pick = pool[0]
            pool.remove(pick)
            chosen.append(pick)
            zones_used.add(pick.zone)
    if len(chosen) < minimum:
        raise WalUnavailable(f"{len(live)} WAL replica(s) live, {minimum} needed")
    return [r.replica_id for r in chosen]


def write_set(ensemble: Sequence[str], write_quorum: int, index: int) -> list[str]:
    """The replicas that hold object ``index`` of a block (BookKeeper's round-robin striping)."""
    size = len(ensemble)
    return [ensemble[(index + j) % size] for j in range(min(write_quorum, size))]


async def write(directory: ReplicaDirectory, replicas: Sequence[str], ack_quorum: int, block: str, key: str,
                data: bytes | memoryview | list, *, background: set[asyncio.Task]) -> list[str]:
    """Append ``key`` to ``replicas``; returns once ``ack_quorum`` have it durably.

    The writes still running then finish in the background (tracked in
    ``background``). Returns the replicas that failed by then; raises WalUnavailable
    (or BlockFenced when a replica fenced the block) if the quorum cannot be met.
    """
    pending: dict[asyncio.Task, str] = {}
    failed: list[tuple[str, BaseException]] = []
    for replica_id in replicas:
        replica = directory.replica(replica_id)
        if replica is None:
            failed.append((replica_id, WalUnavailable(f"WAL replica {replica_id} is unknown")))
            continue
        pending[asyncio.ensure_future(replica.append(block, key, data))] = replica_id
    acked = 0
    try:
        while pending and acked < ack_quorum and len(pending) + acked >= ack_quorum:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                replica_id = pending.pop(task)
                if task.exception() is None:
                    acked += 1
                else:
                    failed.append((replica_id, task.exception()))
    finally:
        for task in pending:  # the slower replicas finish on their own
            background.add(task)
            task.add_done_callback(_background_done(background, key, pending[task]))
    if acked >= ack_quorum:
        return [replica_id for replica_id, _ in failed]
    if any(isinstance(exc, BlockFenced) for _, exc in failed):
        raise BlockFenced(f"block {block} was fenced by a recovery")
    reasons = "; ".join(f"{r}: {exc}" for r, exc in failed)
    full = any(isinstance(exc, WalFull) for _, exc in failed)
    raise WalUnavailable(f"object {key}: {acked} of {ack_quorum} WAL replica(s) acknowledged"
                         f"{' (a replica is full)' if full else ''}: {reasons}")


def _background_done(background: set[asyncio.Task], key: str, replica_id: str):
    def done(task: asyncio.Task) -> None:
        background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.info("WAL replica %s did not take %s: %s", replica_id, key, task.exception())
    return done


async def read(directory: ReplicaDirectory, replicas: Sequence[str], key: str, start: int = 0,
               end: int | None = None) -> bytes:
    """The bytes ``[start, end)`` of ``key`` from the first of ``replicas`` that has them
    (this process's own first). Raises EntryNotFound when none has it, WalUnavailable when
    none that might have it answered."""
    local = directory.local_id()
    errors: list[str] = []
    unreachable = 0
    for replica_id in sorted(replicas, key=lambda r: r != local):
        replica = directory.replica(replica_id)
        if replica is None:
            unreachable += 1
            errors.append(f"{replica_id}: unknown")
            continue
        try:
            return await replica.read(key, start, end)
        except EntryNotFound:
            errors.append(f"{replica_id}: not held")
        except (WalError, OSError, asyncio.TimeoutError) as exc:
            unreachable += 1
            errors.append(f"{replica_id}: {exc}")
    if unreachable:
        raise WalUnavailable(f"object {key} could not be read from its WAL replicas: {'; '.join(errors)}")
    raise EntryNotFound(f"no WAL replica holds {key}")


async def fence(directory: ReplicaDirectory, ensemble: Sequence[str], write_quorum: int, ack_quorum: int,
                block: str) -> set[str]:
    """Fence ``block`` on its ensemble; returns every key the fenced replicas hold.

    Succeeds only when no write set keeps ``ack_quorum`` unfenced replicas (so a writer
    that wakes up can never have another object acknowledged) and, for the same
    reason, every acknowledged object is on some fenced replica.
    """
    async def one(replica_id: str) -> list[str] | None:
        replica = directory.replica(replica_id)
        if replica is None:
            return None
        try:
            return await replica.fence(block)
        except (WalError, OSError, asyncio.TimeoutError) as exc:
            log.info("fencing block %s on WAL replica %s failed: %s", block, replica_id, exc)
            return None

    answers = await asyncio.gather(*(one(r) for r in ensemble))
    fenced = {r for r, keys in zip(ensemble, answers) if keys is not None}
    need = write_quorum - ack_quorum + 1
    for index in range(len(ensemble)):
        members = write_set(ensemble, write_quorum, index)
        if sum(r in fenced for r in members) < min(need, len(members)):
            raise WalUnavailable(f"block {block}: only {len(fenced)} of {len(ensemble)} WAL replica(s) could be "
                                 f"fenced; {need} of each write set are needed")
    return {key for keys in answers if keys is not None for key in keys}


__all__ = ["Durability", "LOCAL", "OBJECT", "OBJECT_STORE", "PROFILES", "REPLICATED", "ReplicaDirectory",
           "ReplicaInfo", "WalReplica", "WalUnavailable", "choose_ensemble", "fence", "read", "write", "write_set"]
