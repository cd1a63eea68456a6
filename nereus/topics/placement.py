"""Where a topic is served: the interface the protocols ask, whatever runs behind it.

A stream is written (and its subscriptions dispatched) by exactly one broker at a
time, its owner. The protocols only ask questions of a ``Placement``: which brokers
are live, who owns a topic or should, may this broker serve a topic's writes
(``claim``). A single process owns everything (``LocalPlacement``); a cluster
answers from its membership, ring and ownership records (``nereus.broker.cluster``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..storage import StreamFenced

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """How clients reach one broker."""

    name: str
    node_id: int  # Kafka's integer broker id
    zone: str
    pulsar_url: str  # pulsar://host:port
    kafka_host: str
    kafka_port: int
    http_url: str  # http://host:port
    # Pulsar's advertised listeners: (name, pulsar://host:port or "", http://host:port or "") and, when the
    # listener has TLS URLs, (pulsar+ssl://host:port or "", https://host:port or ""); empty when not configured
    # (records of brokers that predate them have none either).
    listeners: tuple[tuple[str, ...], ...] = ()
    pulsar_tls_url: str = ""  # pulsar+ssl://host:port, or "" (no TLS listener)
    https_url: str = ""  # https://host:port, or ""
    # Kafka listeners besides PLAINTEXT (kafka_port): (security protocol, port), e.g. ("SSL", 9093).
    kafka_listeners: tuple[tuple[str, int], ...] = ()
    wal_replica: str = ""  # the id of this broker's WAL replica ("": it holds none)
    wal_address: str = ""  # host:port of its WAL replica service
    wal_tls: bool = False  # the service takes mutual TLS only (brokerClientTlsEnabled)

    def kafka_port_for(self, protocol: str) -> int:
        """The port of this broker's Kafka listener of ``protocol`` (kafka_port for PLAINTEXT; 0: none)."""
        if protocol == "PLAINTEXT":
            return self.kafka_port
        return next((port for name, port in self.kafka_listeners if name == protocol), 0)

    @property
    def kafka_address(self) -> str:
        return f"{self.kafka_host}:{self.kafka_port}"

    def urls_for(self, listener: str | None) -> tuple[str, str]:
        """The (pulsar, http) URLs a client of advertised listener ``listener`` is told (None: the default ones).

        Raises UnknownListener when the broker has no such listener.
        """
        if not listener:
            return self.pulsar_url, self.http_url
        found = self._listener(listener)
        return found[1], found[2] or self.http_url

    def tls_urls_for(self, listener: str | None) -> tuple[str, str]:
        """The (pulsar+ssl, https) URLs a client of ``listener`` is told ("" where there is none)."""
        if not listener:
            return self.pulsar_tls_url, self.https_url
        found = self._listener(listener)
        return (found[3], found[4]) if len(found) >= 5 else ("", "")

    def _listener(self, listener: str) -> tuple[str, ...]:
        for found in self.listeners:
            if found[0] == listener:
                return found
        # Pulsar's wording: the official clients recognise it.
        raise UnknownListener(f"the broker do not have {listener} listener")


class UnknownListener(LookupError):
    """A lookup named an advertised listener the broker does not have."""


class NotOwner(StreamFenced):
    """Another broker serves this topic's writes (``owner``), or nobody can right now (None)."""

    def __init__(self, message: str, owner: BrokerAddress | None = None) -> None:
        super().__init__(message)
        self.owner = owner


class Placement:
    """The answers of a single broker that serves every topic itself."""

    def __init__(self, local: BrokerAddress) -> None:
        self.local = local

    def brokers(self) -> list[BrokerAddress]:
        """The live brokers that accept topics, in node id order."""
        return [self.local]

    def preferred(self, key: str, zone: str | None = None) -> BrokerAddress:
        """The broker that should serve ``key`` (a topic or a group), nearest ``zone`` for reads."""
        return self.local

    async def owner(self, topic: str) -> BrokerAddress:
        """The broker serving ``topic`` now, or the one that will when it is first used."""
        return self.local

    async def owners(self, topics: list[str]) -> list[BrokerAddress | None]:
        """``owner`` of each topic, read together (a Metadata answer names thousands); None where
        nobody can serve one right now."""
        return [await or_none(self.owner(topic)) for topic in topics]

    async def lookup(self, topic: str, *, authoritative: bool = False) -> tuple[BrokerAddress, bool]:
        """Where a client should go for ``topic``: (broker, final). Not final: ask that broker again."""
        return self.local, True

    async def claim(self, topic: str) -> None:
        """Become (or stay) the topic's owner; raises NotOwner when another broker is or should be."""

    async def while_serving(self, topic: str, awaitable):
        """``awaitable``'s result; NotOwner if this broker stops serving meanwhile (lost its session)."""
        return await awaitable

    def check_serving(self, topic: str) -> None:
        """Raise NotOwner (naming where to go, if known) when this broker cannot serve ``topic`` now
        without the metadata plane (it lost its session): answered before anything waits on it."""

    def owns(self, topic: str) -> bool:
        return True



async def or_none(lookup) -> BrokerAddress | None:
    """The owner ``lookup`` names; None when nobody can serve the topic right now (clients retry)."""
    try:
        return await lookup
    except NotOwner as exc:  # its owner just died and its record has not expired yet
        log.debug("no owner to name: %s", exc)
    except Exception as exc:  # one failed lookup must not fail a whole answer
        log.warning("owner lookup failed: %s", exc)
    return None

__all__ = ["BrokerAddress", "NotOwner", "Placement", "UnknownListener", "or_none"]
