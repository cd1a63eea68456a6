"""What the transaction room's handlers are given, and the broker's transactions as they see them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ....meta import MetadataStore
from ....transactions.producer_ids import ProducerIds
from ..catalog.catalog import Catalog
from ..catalog.routing import Routing
from .data_path import TxnSignals

if TYPE_CHECKING:
    from ..groups.coordinator import Coordinator


@dataclass
class Transactions:
    """The broker's transactions: ``coordinator``, ``streams`` and ``participants`` are the transactions
    layer's, set when the broker enables them (None until then); ``signals`` wake the long polls held at
    a last stable offset."""

    signals: TxnSignals = field(default_factory=TxnSignals)
    coordinator: object = None  # nereus.transactions.TransactionCoordinator
    streams: object = None  # StreamTransactions: each stream's open and aborted transactions
    participants: object = None  # BrokerParticipants: the markers this broker writes

    @property
    def enabled(self) -> bool:
        return self.coordinator is not None


@dataclass(frozen=True, slots=True)
class TxnContext:
    """What InitProducerId, the transaction APIs, WriteTxnMarkers and TxnOffsetCommit use."""

    catalog: Catalog
    routing: Routing
    txns: Transactions
    groups: Coordinator  # the group coordinator: TxnOffsetCommit checks the member's generation
    meta: MetadataStore  # where the offsets of open transactions are held
    producer_ids: ProducerIds


__all__ = ["Transactions", "TxnContext"]
