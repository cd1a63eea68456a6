"""The authorization check every handler makes (``allowed``), against the connection's principal.

Without ``authorizationEnabled`` every operation is allowed. A connection carries its
broker's authorizer (None: authorization disabled), its principal and its peer.
"""

from __future__ import annotations

import logging

from ....auth.kafka_acls import CLUSTER, CREATE, IDEMPOTENT_WRITE, TOPIC

log = logging.getLogger(__name__)

CLUSTER_NAME = "kafka-cluster"


def _host(conn) -> str:
    return conn.peer.rsplit(":", 1)[0] if ":" in conn.peer else conn.peer


async def allowed(conn, resource_type: int, name: str, operation: int) -> bool:
    """May this connection's principal do ``operation`` on the resource (always, without authorization)?"""
    authorizer = conn.authorizer
    if authorizer is None:
        return True
    ok = await authorizer.kafka_allowed(conn.principal, _host(conn), resource_type, name, operation)
    if not ok:
        log.info("kafka: User:%s from %s refused operation %d on resource %d %s", conn.principal, conn.peer,
                 operation, resource_type, name)
    return ok


async def allowed_items(conn, resource_type: int, items: list, operation: int) -> list:
    """The (name, ...) items whose resource ``allowed`` lets the principal ``operation`` on, in order."""
    if conn.authorizer is None:  # a listing of many topics needs no check of each
        return items
    return [item for item in items if await allowed(conn, resource_type, item[0], operation)]


#: The operations Kafka reports as authorized on a topic and on the cluster (Metadata, DescribeCluster).
TOPIC_OPERATIONS = (3, 4, 5, 6, 7, 8, 10, 11)  # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE/ALTER_CONFIGS
CLUSTER_OPERATIONS = (5, 7, 8, 9, 10, 11, 12)  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE/ALTER_CONFIGS
#                                                IDEMPOTENT_WRITE


async def authorized_operations(conn, resource_type: int, name: str, operations: tuple[int, ...]) -> int:
    """The bit field of ``operations`` the principal may do on the resource (bit ``op`` set when allowed)."""
    bits = 0
    for operation in operations:
        if await allowed(conn, resource_type, name, operation):
            bits |= 1 << operation
    return bits


async def may_create(conn, topic: str) -> bool:
    """CREATE on the topic or on the cluster (a Pulsar produce grant counts, as a Pulsar producer creates)."""
    return await allowed(conn, TOPIC, topic, CREATE) or await allowed(conn, CLUSTER, CLUSTER_NAME, CREATE)


async def may_write_idempotently(conn) -> bool:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on some topic: what Kafka asks of InitProducerId without a
    transactional id."""
    authorizer = conn.authorizer
    if authorizer is None or await allowed(conn, CLUSTER, CLUSTER_NAME, IDEMPOTENT_WRITE):
        return True
    return await authorizer.kafka_writes_some_topic(conn.principal, _host(conn))


__all__ = ["CLUSTER_NAME", "allowed", "allowed_items", "may_create", "may_write_idempotently"]
