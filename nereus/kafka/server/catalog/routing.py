"""What the Kafka protocol tells clients about the cluster, from the broker's ``Placement``.

Kafka clients route by node id: Metadata names the brokers and each partition's
leader, FindCoordinator names a group's coordinator, and a Fetch may name a
preferred read replica (KIP-392). All of these are answered here from
``service.registry.placement``, read on every call (the registry's placement is
replaced once the broker has registered). The leader is the topic's owner (the
broker that holds its append session); a group's coordinator is the ring's broker
for ``group:{id}``; reads need no owner, so any broker serves them from storage.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from ....topics.placement import BrokerAddress, NotOwner

log = logging.getLogger(__name__)

NO_LEADER = -1
MAX_CONCURRENT_LOOKUPS = 256  # owner lookups in flight for one Metadata request


@dataclass(frozen=True, slots=True)
class KafkaBroker:
    """One broker as Kafka clients see it."""

    node_id: int
    host: str
    port: int
    rack: str | None


def placement(service):
    return service.registry.placement


def is_local(service, address: BrokerAddress) -> bool:
    return address.name == placement(service).local.name


def kafka_broker(service, address: BrokerAddress, protocol: str = "PLAINTEXT") -> KafkaBroker:
    """``address`` as a client of the ``protocol`` listener reaches it (as Kafka, each listener names its own)."""
    # This broker answers with its own listener's view: a single broker's placement
    # (standalone) carries no Kafka address, and the node id is set at registration.
    if is_local(service, address):
        return KafkaBroker(service.node_id, service.advertised_host, service.listener_ports.get(protocol, 0),
                           address.zone or None)
    return KafkaBroker(address.node_id, address.kafka_host, address.kafka_port_for(protocol), address.zone or None)


def node_id(service, address: BrokerAddress) -> int:
    return service.node_id if is_local(service, address) else address.node_id


def brokers(service, also=(), protocol: str = "PLAINTEXT") -> list[KafkaBroker]:
    """Every live broker, in node id order, with the brokers in ``also`` that are not listed.

    A draining broker takes no new topics but still serves those it owns until
    they moved: as their leader it must be listed, or clients could not reach it.
    A broker without a listener of ``protocol`` is left out (Kafka does the same).
    """
    listed = {a.name: a for a in placement(service).brokers()}
    for address in also:
        listed.setdefault(address.name, address)
    found = (kafka_broker(service, a, protocol) for a in listed.values())
    return sorted((b for b in found if b.port or protocol == "PLAINTEXT"), key=lambda b: b.node_id)


async def leader(service, stream: str) -> BrokerAddress | None:
    """The stream's owner; None when nobody can serve it right now (clients retry)."""
    try:
        return await placement(service).owner(stream)
    except NotOwner as exc:  # its owner just died and its record has not expired yet
        log.debug("kafka: no leader for %s: %s", stream, exc)
    except Exception as exc:  # one failed lookup must not fail a whole Metadata answer
        log.warning("kafka: owner lookup of %s failed: %s", stream, exc)
    return None


async def gather_bounded(func, items, limit: int = MAX_CONCURRENT_LOOKUPS) -> list:
    """``[await func(item) for item in items]``, at most ``limit`` at a time (metadata reads)."""
    gate = asyncio.Semaphore(limit)

    async def one(item):
        async with gate:
            return await func(item)

    return list(await asyncio.gather(*(one(item) for item in items)))


# -- groups --------------------------------------------------------------------------------
def coordinator_key(group_id: str) -> str:
    return "group:" + group_id


def coordinator(service, group_id: str) -> BrokerAddress:
    return placement(service).preferred(coordinator_key(group_id))


def is_coordinator(service, group_id: str) -> bool:
    return is_local(service, coordinator(service, group_id))


def coordinates(service, group_id: str) -> bool:
    """True if this broker is the group's coordinator; if not, its copy of the group is dropped.

    A group the ring moved away is reloaded from metadata if it ever comes back, so
    this broker never answers from a copy another coordinator has changed since.
    """
    if is_coordinator(service, group_id):
        return True
    service.coordinator.release(group_id, "the ring moved its coordinator to another broker")
    return False


# -- transactions --------------------------------------------------------------------------
def txn_coordinator(service, transactional_id: str) -> BrokerAddress:
    """The transaction coordinator of a transactional id: the ring's broker for ``txn:{id}``."""
    return placement(service).preferred("txn:" + transactional_id)


def is_txn_coordinator(service, transactional_id: str) -> bool:
    return is_local(service, txn_coordinator(service, transactional_id))


# -- fetch from the nearest replica (KIP-392) ----------------------------------------------
def read_replica(service, stream: str, rack_id: str | None) -> int:
    """The node id a consumer in ``rack_id`` should fetch ``stream`` from instead of here; -1: here.

    Only a broker of the consumer's own zone is named: a zone without brokers, or a
    consumer in this broker's zone, reads here.
    """
    if not rack_id:
        return NO_LEADER
    where = placement(service)
    if rack_id == where.local.zone:
        return NO_LEADER
    nearest = where.preferred(stream, zone=rack_id)
    if nearest.zone != rack_id or is_local(service, nearest):
        return NO_LEADER
    return nearest.node_id


__all__ = ["KafkaBroker", "NO_LEADER", "brokers", "coordinates", "coordinator", "coordinator_key", "is_local",
           "gather_bounded", "is_coordinator", "is_txn_coordinator", "kafka_broker", "leader", "node_id", "placement", "read_replica",
           "txn_coordinator"]
