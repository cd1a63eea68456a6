"""Errors of the transaction coordinator, named after the state they report.

Each maps to one Kafka error code and one Pulsar ServerError at the protocol edge.
"""


class TransactionError(Exception):
    """Root of every transaction error."""


class ProducerFenced(TransactionError):
    """A newer epoch (or producer id) owns the transactional id: this producer is a zombie."""


class InvalidTxnState(TransactionError):
    """The request does not fit the transaction's state (e.g. commit of an aborted one)."""


class ConcurrentTransactions(TransactionError):
    """The previous transaction is still being completed: retry shortly."""


class InvalidProducerIdMapping(TransactionError):
    """No transaction record for this transactional id, or it belongs to another producer id."""


class TransactionNotFound(InvalidProducerIdMapping):
    """A Pulsar transaction that does not exist (never created, or expired and forgotten)."""


class InvalidTransactionTimeout(TransactionError):
    """The requested timeout is not positive or exceeds the coordinator's maximum."""


class MarkerNotWritten(TransactionError):
    """A partition's marker could not be written now (e.g. another broker owns it): retried later."""


__all__ = ["ConcurrentTransactions", "InvalidProducerIdMapping", "InvalidTransactionTimeout", "InvalidTxnState",
           "MarkerNotWritten", "ProducerFenced", "TransactionError", "TransactionNotFound"]
