"""What the data room's handlers are given."""

from __future__ import annotations

from dataclasses import dataclass

from ....storage import StreamStorage
from ..catalog.catalog import Catalog
from ..catalog.configs import TopicConfigs
from ..catalog.routing import Routing
from ..security.quotas import Throttles
from ..txn.context import Transactions


@dataclass(frozen=True, slots=True)
class DataContext:
    """What Produce, Fetch, ListOffsets, OffsetForLeaderEpoch and DeleteRecords use."""

    catalog: Catalog
    configs: TopicConfigs
    storage: StreamStorage  # whether writes are taken (out of space: refused)
    routing: Routing  # the replica near a consumer (KIP-392)
    throttles: Throttles  # producer_byte_rate, consumer_byte_rate
    txns: Transactions  # transactional produce, read_committed fetches


__all__ = ["DataContext"]
