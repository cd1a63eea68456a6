"""Topic-level policies: ``/admin/v2/persistent/{tenant}/{namespace}/{topic}/retention`` (GET, POST, DELETE)
and ``.../schemaCompatibilityStrategy`` (GET, PUT, DELETE; read by the schema registry).

Stored as one JSON record per topic (``nereus.ledger.policies.topic_policies_key``)
shaped like Pulsar's ``TopicPolicies``. Set on a partitioned topic, a policy applies
to each partition. A topic's retention overrides its namespace's in enforcement
(``retention.py``). ``GET ...?applied=true`` answers the policy in force: the topic's,
else the namespace's, else the broker's ``defaultRetention*`` settings (-1 and -1 unless set).
``.../replication`` (GET, POST, DELETE) is the topic's ``replicationClusters``: checked as a
namespace's (``replication.py``), it overrides the namespace's
``replication_clusters`` for the replicator (``nereus.ledger.clusters.replication_clusters``).
Metadata only, so any broker answers (see ``routing.ANYWHERE``).
"""

from __future__ import annotations

import json

from aiohttp import web

from ...meta import UnexpectedVersion, cas
from ...tasks import spawn
from ...pulsar.server.topics import refresh_policies
from ...topics import partitions_of, persistence, schemas
from ...ledger.clusters import NAMESPACE_REPLICATION_FIELD, TOPIC_REPLICATION_FIELD
from ...ledger.policies import topic_policies_key, topic_policies_prefix
from . import retention
from .common import (UPDATE_ATTEMPTS, AdminContext, AdminError, body, context, flag, known_clusters,
                     namespace_policies, no_content, require_namespace, require_tenant, stream_exists, topic_name)
from .replication import replication_clusters_of

async def require_policy_topic(ctx: AdminContext, request: web.Request):
    name = topic_name(request)
    await require_namespace(ctx.meta, name.tenant, name.namespace)
    if not await partitions_of(ctx.meta, name) and not await stream_exists(ctx.storage, name):
        raise AdminError(404, "Topic not found")
    return name.base


async def set_policy(ctx: AdminContext, name, field: str, value) -> None:
    """Set (or with None remove) one policy of the topic's record by compare-and-set."""
    def change(old: bytes | None) -> bytes | None:
        stored = json.loads(old) if old is not None else {}
        if value is None and field not in stored:
            return None
        if value is None:
            stored.pop(field)
        else:
            stored[field] = value
        return json.dumps(stored).encode()

    try:
        await cas.update(ctx.meta, topic_policies_key(name.tenant, name.namespace, name.local), change,
                         max_attempts=UPDATE_ATTEMPTS)
    except UnexpectedVersion:
        raise AdminError(409, "The topic policies were modified concurrently; try again") from None


def _enforce_soon(ctx: AdminContext, name) -> None:
    task = spawn(retention.enforce_namespace(ctx, name.tenant, name.namespace, only=name), f"retention of {name}")
    ctx.tasks.append(task)
    task.add_done_callback(lambda t: ctx.tasks.remove(t) if t in ctx.tasks else None)


async def get_retention(request: web.Request) -> web.Response:
    ctx = context(request)
    name = await require_policy_topic(ctx, request)
    own = await retention.topic_retention(ctx.meta, name)
    if own is not None:
        return web.json_response(own)
    if not flag(request, "applied"):
        return no_content()  # Pulsar answers an unset policy with an empty body
    policies = await namespace_policies(ctx.meta, name.tenant, name.namespace) or {}
    return web.json_response(policies.get("retention_policies") or retention.broker_default(ctx))


async def set_retention(request: web.Request) -> web.Response:
    ctx = context(request)
    value = retention.validate(await body(request))
    name = await require_policy_topic(ctx, request)
    await set_policy(ctx, name, "retention_policies", value)
    _enforce_soon(ctx, name)
    return no_content()


async def remove_retention(request: web.Request) -> web.Response:
    ctx = context(request)
    name = await require_policy_topic(ctx, request)
    await set_policy(ctx, name, "retention_policies", None)
    _enforce_soon(ctx, name)  # the namespace's policy applies again
    return no_content()


async def delete_all(ctx: AdminContext, name) -> None:
    """Forget a deleted topic's policies (a topic created again under the name starts without them)."""
    base = name.base
    await ctx.meta.delete(topic_policies_key(base.tenant, base.namespace, base.local))


async def delete_namespace(ctx: AdminContext, tenant: str, namespace: str) -> None:
    """Forget the policies of every topic of a deleted namespace."""
    prefix = topic_policies_prefix(tenant, namespace)
    await ctx.meta.delete_range(prefix + "/", prefix + "/\U0010ffff")


async def get_schema_strategy(request: web.Request) -> web.Response:
    ctx = context(request)
    name = await require_policy_topic(ctx, request)
    raw = await ctx.meta.get(topic_policies_key(name.tenant, name.namespace, name.local))
    own = json.loads(raw.value).get("schema_compatibility_strategy") if raw is not None else None
    if own is not None:
        return web.json_response(own)
    if not flag(request, "applied"):
        return no_content()
    return web.json_response(await schemas.strategy_of(ctx.meta, name, ctx.pulsar.registry.schema_compatibility_strategy))


async def set_schema_strategy(request: web.Request) -> web.Response:
    ctx = context(request)
    value = await body(request)
    if value not in schemas.STRATEGIES + ("UNDEFINED",):
        raise AdminError(400, f"Unknown schema compatibility strategy {value!r}")
    name = await require_policy_topic(ctx, request)
    await set_policy(ctx, name, "schema_compatibility_strategy", None if value == "UNDEFINED" else value)
    return no_content()


async def remove_schema_strategy(request: web.Request) -> web.Response:
    ctx = context(request)
    name = await require_policy_topic(ctx, request)
    await set_policy(ctx, name, "schema_compatibility_strategy", None)
    return no_content()


async def get_persistence(request: web.Request) -> web.Response:
    """The topic's persistence policies; ``?applied=true``: the ones in force (the topic's, else its
    namespace's, else the broker's defaults)."""
    ctx = context(request)
    name = await require_policy_topic(ctx, request)
    raw = await ctx.meta.get(topic_policies_key(name.tenant, name.namespace, name.local))
    own = json.loads(raw.value).get(persistence.FIELD) if raw is not None else None
    if own is not None:
        return web.json_response(own)
    if not flag(request, "applied"):
        return no_content()
    policies = await namespace_policies(ctx.meta, name.tenant, name.namespace) or {}
    if policies.get(persistence.FIELD) is not None:
        return web.json_response(policies[persistence.FIELD])
    return web.json_response(persistence.as_policy(ctx.storage.durability))


async def persistence_body(request: web.Request) -> dict:
    """The request's persistence policies, checked (400 with Pulsar's reason)."""
    try:
        return persistence.validate(await body(request))
    except persistence.InvalidPersistence as exc:
        raise AdminError(400, str(exc)) from None


async def set_persistence(request: web.Request) -> web.Response:
    ctx = context(request)
    value = await persistence_body(request)
    name = await require_policy_topic(ctx, request)
    await set_policy(ctx, name, persistence.FIELD, value)
    await refresh_policies(ctx.pulsar, name.tenant, name.namespace)  # its loaded partitions switch at once
    return no_content()


async def remove_persistence(request: web.Request) -> web.Response:
    ctx = context(request)
    name = await require_policy_topic(ctx, request)
    await set_policy(ctx, name, persistence.FIELD, None)
    await refresh_policies(ctx.pulsar, name.tenant, name.namespace)
    return no_content()


async def get_replication(request: web.Request) -> web.Response:
    """The topic's replication clusters; ``?applied=true``: the ones in force (the topic's, else its
    namespace's, else the local cluster)."""
    ctx = context(request)
    name = await require_policy_topic(ctx, request)
    raw = await ctx.meta.get(topic_policies_key(name.tenant, name.namespace, name.local))
    own = json.loads(raw.value).get(TOPIC_REPLICATION_FIELD) if raw is not None else None
    if own is not None:
        return web.json_response(own)
    if not flag(request, "applied"):
        return no_content()
    policies = await namespace_policies(ctx.meta, name.tenant, name.namespace) or {}
    return web.json_response(policies.get(NAMESPACE_REPLICATION_FIELD) or [ctx.cluster_name])


async def set_replication(request: web.Request) -> web.Response:
    ctx = context(request)
    given = await body(request)
    name = await require_policy_topic(ctx, request)
    tenant_info = await require_tenant(ctx.meta, name.tenant)
    clusters = replication_clusters_of(given, tenant=name.tenant, allowed=tenant_info.get("allowedClusters") or
                                       [ctx.cluster_name], known=await known_clusters(ctx))
    await set_policy(ctx, name, TOPIC_REPLICATION_FIELD, clusters)
    await refresh_policies(ctx.pulsar, name.tenant, name.namespace)  # its loaded partitions follow at once
    return no_content()


async def remove_replication(request: web.Request) -> web.Response:
    ctx = context(request)
    name = await require_policy_topic(ctx, request)
    await set_policy(ctx, name, TOPIC_REPLICATION_FIELD, None)
    await refresh_policies(ctx.pulsar, name.tenant, name.namespace)
    return no_content()


def add_routes(router: web.UrlDispatcher) -> None:
    t = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    router.add_get(t + "/persistence", get_persistence)
    router.add_post(t + "/persistence", set_persistence)
    router.add_delete(t + "/persistence", remove_persistence)
    router.add_get(t + "/schemaCompatibilityStrategy", get_schema_strategy)
    router.add_put(t + "/schemaCompatibilityStrategy", set_schema_strategy)
    router.add_delete(t + "/schemaCompatibilityStrategy", remove_schema_strategy)
    router.add_get(t + "/replication", get_replication)
    router.add_post(t + "/replication", set_replication)
    router.add_delete(t + "/replication", remove_replication)
    router.add_get(t + "/retention", get_retention)
    router.add_post(t + "/retention", set_retention)
    router.add_delete(t + "/retention", remove_retention)


__all__ = ["add_routes", "delete_all", "delete_namespace", "require_policy_topic", "set_policy"]
