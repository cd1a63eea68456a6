"""Pulsar-compatible admin REST API (``/admin/v2``) on the broker's HTTP listener.

One module per resource: tenants, namespaces (and their policies), topics, topic
policies, permissions (grants), subscriptions, stats, schemas, broker configuration (brokers.py), the
clusters and this one's brokers (cluster.py; replication.py checks replication clusters lists), Pulsar's
HTTP lookup (lookup.py); retention.py applies retention policies; routing.py sends
topic calls to the topic's owner. ``register(app)`` adds the routes and the
middlewares; ``attach(app, ...)`` hands them the running storage, metadata store,
PulsarService and broker node (until then they answer 503), makes sure ``public``
and ``public/default`` exist and starts the background tasks (retention, under a
cluster-wide lease when the broker is part of a cluster; stats rate sampling),
stopped at app cleanup.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from ...ledger.naming import TopicName
from ...ledger.policies import ensure_default_namespace
from ...tasks import spawn
from ..cluster.lease import run_under_lease
from . import (brokers, cluster, compaction, lookup, messages, namespace_unload, namespaces, non_persistent,
               permissions, rate_policies,
               retention, routing, schemas, stats, subscriptions, tenants, topic_policies, topics)
from .common import CONTEXT, DEFAULT_CLUSTER, AdminContext, errors

#: The lease under which one broker of the cluster applies retention policies.
RETENTION_LEASE = "retention"


def register(app: web.Application) -> None:
    app[CONTEXT] = AdminContext()
    app.middlewares.append(errors)  # outermost: also formats the routing middleware's errors
    app.middlewares.append(routing.to_owner)
    # brokers before cluster: ``/brokers/configuration`` before ``/brokers/{cluster}``.
    for module in (tenants, namespaces, namespace_unload, topics, topic_policies, subscriptions, stats, schemas,
                   brokers, cluster, lookup, non_persistent, compaction, permissions, rate_policies, messages):
        module.add_routes(app.router)
    app.on_cleanup.append(_stop)


async def attach(app: web.Application, *, storage, meta, pulsar, node=None,
                 retention_interval: float = retention.INTERVAL) -> None:
    """Serve the admin API over these services (call once the Pulsar listener runs).

    ``node`` (the BrokerNode) gives the cluster resources and drain; with it, retention
    runs on one broker of the cluster at a time (its lease status is in ``node.leases``).
    """
    ctx = app[CONTEXT]
    await ensure_default_namespace(meta, node.options.cluster_name if node is not None else DEFAULT_CLUSTER)
    ctx.storage, ctx.meta, ctx.pulsar, ctx.node = storage, meta, pulsar, node
    if node is None:
        passes = retention.run(ctx, retention_interval)
    else:
        passes = run_under_lease(meta, RETENTION_LEASE, node.membership.name,
                                 lambda: retention.run(ctx, retention_interval), status=node.leases,
                                 poll_seconds=node.options.lease_poll_seconds)
    ctx.tasks.append(asyncio.ensure_future(passes))
    kafka = getattr(node, "kafka", None)
    if kafka is not None:
        # A Kafka topic's retention.ms / retention.bytes apply at once, as a Pulsar topic policy does.
        def configs_changed(topic: str | None) -> None:
            only = TopicName("persistent", retention.KAFKA_TENANT, retention.KAFKA_NAMESPACE, topic) if topic else None
            spawn(retention.enforce_namespace(ctx, retention.KAFKA_TENANT, retention.KAFKA_NAMESPACE, only),
                  f"retention of kafka topic {topic or '(all)'}")

        kafka.configs.listeners.append(configs_changed)
    interval = node.options.compaction_monitor_interval if node is not None else compaction.MONITOR_INTERVAL
    if interval > 0:  # each broker checks the topics it serves
        ctx.tasks.append(asyncio.ensure_future(compaction.monitor(ctx, interval)))


async def _stop(app: web.Application) -> None:
    ctx = app[CONTEXT]
    tasks, ctx.tasks = list(ctx.tasks), []
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    ctx.pulsar = None


__all__ = ["attach", "register"]
