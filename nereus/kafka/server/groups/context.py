"""What the group room's handlers are given."""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import DESCRIBE, GROUP
from ....meta import MetadataStore
from ..catalog.catalog import Catalog
from ..security import access
from ..share.context import ShareContext
from .coordinator import Coordinator
from .group import Group
from .members import GroupError


@dataclass(frozen=True, slots=True)
class GroupContext:
    """What the classic and consumer group APIs use; ListGroups and DeleteGroups reach share groups too."""

    coordinator: Coordinator
    catalog: Catalog
    meta: MetadataStore  # where the offsets of open transactions are held
    share: ShareContext
    heartbeat_interval: float  # seconds a consumer-protocol member is told to heartbeat at (KIP-848)
    configs: object = None  # TopicConfigs: each group's consumer.session.timeout.ms / heartbeat.interval.ms

    async def consumer_timings(self, group_id: str) -> tuple[float, float]:
        """(session timeout, heartbeat interval) in seconds for a consumer-protocol group: its group
        configs, else the broker's."""
        if self.configs is None:
            return self.coordinator.consumer_session_timeout, self.heartbeat_interval
        configs = await self.configs.group(group_id)
        return (int(configs["consumer.session.timeout.ms"].value) / 1000,
                int(configs["consumer.heartbeat.interval.ms"].value) / 1000)

    async def group_to_describe(self, conn, group_id: str) -> Group | None:
        """The group a describe request names (None: there is none); GroupError when the principal may
        not describe it or another broker coordinates it."""
        if not await access.allowed(conn, GROUP, group_id, DESCRIBE):
            raise GroupError(ErrorCode.group_authorization_failed.value)
        if not self.coordinator.coordinates(group_id):
            raise GroupError(ErrorCode.not_coordinator.value)
        return await self.coordinator.group_now(group_id)


__all__ = ["GroupContext"]
