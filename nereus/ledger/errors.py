"""Errors of the ledger layer, named after the state they report."""

from __future__ import annotations


class LedgerError(Exception):
    """Base of the ledger's domain errors."""


class CursorFenced(LedgerError):
    """The durable cursor was written (or deleted) by someone else since this copy read it.

    The copy in memory is stale for good: persisting it would overwrite the other
    writer's acknowledgements. Its owner stops using it and reloads the cursor
    from the metadata plane (the Pulsar broker disconnects the subscription's
    consumers, whose reconnect opens the cursor afresh).
    """


__all__ = ["CursorFenced", "LedgerError"]
