"""Geo-replication: topics of a replicated namespace sent on to other Nereus (or Pulsar) clusters."""

from .manager import ATTACHMENT, ReplicationManager, TopicReplication
from .replicator import Replicator, cursor_name, producer_name

__all__ = ["ATTACHMENT", "ReplicationManager", "Replicator", "TopicReplication", "cursor_name", "producer_name"]
