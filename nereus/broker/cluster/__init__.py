"""The cluster of stateless brokers (registry, routing ring, ownership, leases)."""

from .membership import ACTIVE, DRAINING, BrokerRecord, Membership, node_id_for
from .ownership import ClusterPlacement, owner_key
from .ring import HashRing

__all__ = ["ACTIVE", "DRAINING", "BrokerRecord", "ClusterPlacement", "HashRing", "Membership", "node_id_for",
           "owner_key"]
