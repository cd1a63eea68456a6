"""Transactions for both protocols: the coordinator, its records and the per-stream transaction index.

Protocol-neutral: depends on the metadata plane, storage and topics only. See
``coordinator.py`` (the state machine's transitions; its records in ``record_store.py``,
the completion of decisions in ``completion.py``, timeouts and recovery in
``housekeeping.py``), ``stream_index.py`` (last stable offset and aborted ranges per
stream) and ``participants.py`` (markers).
"""

from .coordinator import DEFAULT_MAX_TIMEOUT_MS, TransactionCoordinator
from .errors import (ConcurrentTransactions, InvalidProducerIdMapping, InvalidTransactionTimeout, InvalidTxnState,
                     MarkerNotWritten, ProducerFenced, TransactionError, TransactionNotFound)
from .participants import BrokerParticipants, Participants, control_batch, marker_entry
from .producer_ids import PRODUCER_ID_KEY, ProducerIds
from .records import TxnRecord, TxnState, kafka_key, pulsar_key
from .stream_index import StreamTransactions, TxnView

__all__ = ["BrokerParticipants", "ConcurrentTransactions", "DEFAULT_MAX_TIMEOUT_MS", "InvalidProducerIdMapping",
           "InvalidTransactionTimeout", "InvalidTxnState", "MarkerNotWritten", "PRODUCER_ID_KEY", "Participants",
           "ProducerFenced", "ProducerIds", "StreamTransactions", "TransactionCoordinator", "TransactionError",
           "TransactionNotFound", "TxnRecord", "TxnState", "TxnView", "control_batch", "kafka_key",
           "marker_entry", "pulsar_key"]
