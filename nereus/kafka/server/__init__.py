"""The Kafka protocol listener over StreamStorage (``KafkaService``, see service.py).

Its rooms, by concern: ``wire`` (connections, framing, dispatch, request metrics),
``catalog`` (topics and partitions, configs in force, routing, error codes),
``data`` (Produce, Fetch, offsets), ``txn`` (producer ids and transactions),
``groups`` (classic and consumer groups, committed offsets), ``share`` (share groups),
``security`` (authorization, SASL, quotas) and ``admin`` (topics, configs, cluster
metadata). Each room's handlers take that room's context, built once by the service.
"""

from .service import KafkaService

__all__ = ["KafkaService"]
