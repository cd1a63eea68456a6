"""What the share room's handlers are given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ....meta import MetadataStore
from ....storage import StreamStorage
from ..catalog.catalog import Catalog
from ..catalog.routing import Routing
from .groups import ShareGroups


@dataclass(frozen=True, slots=True)
class ShareContext:
    """The broker's share groups, and what their APIs read and route by."""

    shares: ShareGroups
    catalog: Catalog
    routing: Routing
    storage: StreamStorage
    meta: MetadataStore
    # True if this broker coordinates the group (dropping its copy of a group the ring moved away)
    coordinates: Callable[[str], bool]
    txns: object = None  # the broker's Transactions: what read_committed share groups may see


__all__ = ["ShareContext"]
