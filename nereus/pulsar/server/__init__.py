"""The Pulsar broker side: connections, lookups, producers, subscriptions.

``PulsarService`` listens for official Pulsar clients and maps topics onto
StreamStorage streams (one stream per non-partitioned topic or partition).
Modules: ``connection`` (framing, handshake, routing), ``lookup`` (discovery),
``producers``, ``consumers`` and ``positions`` (subscriptions, acks, seeks),
``dispatcher`` (one dispatch loop per subscription), ``topics``, ``dedup``,
``entries`` (the stored form of a SEND), ``metrics``.
"""

from .service import PulsarService
from .topics import create_partitioned_topic, partitions_of

__all__ = ["PulsarService", "create_partitioned_topic", "partitions_of"]
