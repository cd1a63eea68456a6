"""What the group room's handlers are given."""

from __future__ import annotations

from dataclasses import dataclass

from ....meta import MetadataStore
from ..catalog.catalog import Catalog
from ..share.context import ShareContext
from .coordinator import Coordinator


@dataclass(frozen=True, slots=True)
class GroupContext:
    """What the classic and consumer group APIs use; ListGroups and DeleteGroups reach share groups too."""

    coordinator: Coordinator
    catalog: Catalog
    meta: MetadataStore  # where the offsets of open transactions are held
    share: ShareContext
    heartbeat_interval: float  # seconds a consumer-protocol member is told to heartbeat at (KIP-848)


__all__ = ["GroupContext"]
