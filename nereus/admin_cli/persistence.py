"""Persistence options shared by ``namespaces set-persistence`` and ``topics set-persistence``."""

from __future__ import annotations

import click


def options(command):
    """pulsar-admin's set-persistence flags, and where acknowledged writes live (``--wal-profile``)."""
    for flag in reversed((
        click.option("-e", "--bookkeeper-ensemble", type=click.IntRange(1), required=True,
                     help="WAL replicas of each block of writes."),
        click.option("-w", "--bookkeeper-write-quorum", type=click.IntRange(1), required=True,
                     help="WAL replicas each write goes to."),
        click.option("-a", "--bookkeeper-ack-quorum", type=click.IntRange(1), required=True,
                     help="WAL replicas that must have a write on disk before it is acknowledged."),
        click.option("-r", "--ml-mark-delete-max-rate", type=click.FloatRange(0), default=0.0,
                     help="Pulsar's mark-delete rate limit (kept; acknowledgements are persisted as they come)."),
        click.option("-p", "--wal-profile", type=click.Choice(("object", "replicated", "local")), default=None,
                     help="Where acknowledged writes live until they are in the object store (default: the "
                          "broker's)."),
    )):
        command = flag(command)
    return command


def body(bookkeeper_ensemble: int, bookkeeper_write_quorum: int, bookkeeper_ack_quorum: int,
         ml_mark_delete_max_rate: float, wal_profile: str | None) -> dict:
    """Pulsar's PersistencePolicies JSON (and ``walProfile`` when given)."""
    policy = {"bookkeeperEnsemble": bookkeeper_ensemble, "bookkeeperWriteQuorum": bookkeeper_write_quorum,
              "bookkeeperAckQuorum": bookkeeper_ack_quorum, "managedLedgerMaxMarkDeleteRate": ml_mark_delete_max_rate}
    if wal_profile is not None:
        policy["walProfile"] = wal_profile
    return policy


def view(value) -> str:
    return "not set (broker defaults)" if value is None else str(value)
