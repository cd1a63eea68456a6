"""What the admin room's handlers are given."""

from __future__ import annotations

from dataclasses import dataclass

from ....meta import MetadataStore
from ..catalog.catalog import Catalog
from ..catalog.configs import TopicConfigs
from ..catalog.routing import Routing
from ..security.quotas import Throttles


@dataclass(frozen=True, slots=True)
class TopicLimits:
    """The broker's options on the topics clients create."""

    auto_create: bool  # Metadata creates the topics it is asked about
    default_partitions: int
    max_partitions: int  # maxNumPartitionsPerPartitionedTopic
    max_replication_factor: int  # any factor up to it is accepted and reported


@dataclass(frozen=True, slots=True)
class AdminContext:
    """What Metadata, DescribeCluster, FindCoordinator, the topic and the config APIs use."""

    catalog: Catalog
    configs: TopicConfigs
    routing: Routing
    meta: MetadataStore
    throttles: Throttles  # controller_mutation_rate of topic creations and deletions
    limits: TopicLimits


__all__ = ["AdminContext", "TopicLimits"]
