"""What the share room's handlers are given."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

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
    # (partition, high watermark) -> the stream's transaction view, or None when transactions are off:
    # what read_committed share groups may see (``txn.data_path.view`` bound to the broker's transactions)
    txn_view: Callable[..., Awaitable[object]] | None = None


__all__ = ["ShareContext"]
