"""What the Kafka protocol tells clients about the cluster, from the broker's ``Placement``.

Kafka clients route by node id: Metadata names the brokers and each partition's
leader, FindCoordinator names a group's coordinator, and a Fetch may name a
preferred read replica (KIP-392). All of these are answered here from
the registry's placement, read on every call (the registry's placement is
replaced once the broker has registered). The leader is the topic's owner (the
broker that holds its append session); a group's coordinator is the ring's broker
for ``group:{id}``; reads need no owner, so any broker serves them from storage.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ....topics.placement import BrokerAddress

log = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class KafkaBroker:
    """One broker as Kafka clients see it."""

    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass
class LocalBroker:
    """This broker as its Kafka clients know it: the node id is set when the broker registers,
    the cluster id at start, each listener's port once bound."""

    node_id: int
    advertised_host: str
    listener_ports: dict[str, int] = field(default_factory=dict)  # security protocol -> port
    cluster_id: str = ""


class Routing:
    """Brokers, leaders, coordinators and read replicas, from the registry's placement on every call."""

    def __init__(self, registry, local: LocalBroker) -> None:
        self.registry = registry
        self.local = local

    @property
    def placement(self):
        return self.registry.placement

    def is_local(self, address: BrokerAddress) -> bool:
        return address.name == self.placement.local.name

    def kafka_broker(self, address: BrokerAddress, protocol: str = "PLAINTEXT") -> KafkaBroker:
        """``address`` as a client of the ``protocol`` listener reaches it (as Kafka, each listener names its own)."""
        # This broker answers with its own listener's view: a single broker's placement
        # (standalone) carries no Kafka address, and the node id is set at registration.
        if self.is_local(address):
            local = self.local
            return KafkaBroker(local.node_id, local.advertised_host, local.listener_ports.get(protocol, 0),
                               address.zone or None)
        return KafkaBroker(address.node_id, address.kafka_host, address.kafka_port_for(protocol),
                           address.zone or None)

    def node_id(self, address: BrokerAddress) -> int:
        return self.local.node_id if self.is_local(address) else address.node_id

    def brokers(self, also=(), protocol: str = "PLAINTEXT") -> list[KafkaBroker]:
        """Every live broker, in node id order, with the brokers in ``also`` that are not listed.

        A draining broker takes no new topics but still serves those it owns until
        they moved: as their leader it must be listed, or clients could not reach it.
        A broker without a listener of ``protocol`` is left out (Kafka does the same).
        """
        listed = {a.name: a for a in self.placement.brokers()}
        for address in also:
            listed.setdefault(address.name, address)
        found = (self.kafka_broker(a, protocol) for a in listed.values())
        return sorted((b for b in found if b.port or protocol == "PLAINTEXT"), key=lambda b: b.node_id)

    async def leaders(self, streams: list[str]) -> list[BrokerAddress | None]:
        """Each stream's owner, read together; None where nobody can serve it right now (clients retry)."""
        return await self.placement.owners(streams)

    # -- groups and transactional ids ------------------------------------------------------
    def coordinator(self, group_id: str) -> BrokerAddress:
        return self.placement.preferred(coordinator_key(group_id))

    def is_coordinator(self, group_id: str) -> bool:
        return self.is_local(self.coordinator(group_id))

    def txn_coordinator(self, transactional_id: str) -> BrokerAddress:
        """The transaction coordinator of a transactional id: the ring's broker for ``txn:{id}``."""
        return self.placement.preferred("txn:" + transactional_id)

    def is_txn_coordinator(self, transactional_id: str) -> bool:
        return self.is_local(self.txn_coordinator(transactional_id))

    # -- fetch from the nearest replica (KIP-392) ------------------------------------------
    def read_replica(self, stream: str, rack_id: str | None) -> int:
        """The node id a consumer in ``rack_id`` should fetch ``stream`` from instead of here; -1: here.

        Only a broker of the consumer's own zone is named: a zone without brokers, or a
        consumer in this broker's zone, reads here.
        """
        if not rack_id:
            return NO_LEADER
        where = self.placement
        if rack_id == where.local.zone:
            return NO_LEADER
        nearest = where.preferred(stream, zone=rack_id)
        if nearest.zone != rack_id or self.is_local(nearest):
            return NO_LEADER
        return nearest.node_id


def coordinator_key(group_id: str) -> str:
    return "group:" + group_id


__all__ = ["KafkaBroker", "LocalBroker", "NO_LEADER", "Routing", "coordinator_key"]
