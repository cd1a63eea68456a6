"""``/admin/v2/namespaces``: list, create, get, delete, and the policies users set daily.

Policies are one JSON record per namespace (``schemas.policies_key``), shaped like
Pulsar's ``Policies``: ``retention_policies`` (applied by ``retention.py``),
``deduplicationEnabled`` (applied by the Pulsar broker's topics: re-read by the loaded
topics of the namespace whenever it is set or removed here, and at every topic load;
unset means the broker default, enabled) and ``schema_compatibility_strategy`` (read by the schema
registry when a producer or ``POST .../schema`` registers a schema) and
``autoTopicCreationOverride`` (read by the Pulsar broker on every first use of a
missing topic: ``topics/autocreate.py``) and ``replication_clusters`` (``GET``/``POST
.../replication``: the clusters its topics replicate to, read by the replicator through
``nereus.ledger.clusters.replication_clusters``; unset reads as the local cluster). A
namespace is created with the policies of its ``Policies`` body (``namespace_body.py``).
"""

from __future__ import annotations

import json

from aiohttp import web

from ...auth.authorization import AUTH_FIELD, auth_policies
from ...meta import EXPECT_ABSENT, UnexpectedVersion
from ...pulsar.server.topics import refresh_policies
from ...tasks import spawn
from ...topics import persistence
from ...topics.autocreate import OVERRIDE_FIELD
from ...ledger.policies import policies_key, replace_untouched_default
from ...topics.schemas import AUTO_UPDATE_STRATEGIES, STRATEGIES
from . import retention, topic_policies, topics
from .namespace_body import REPLICATION_FIELD, auto_creation, policies_from_body
from .replication import replication_clusters_of
from .common import (AdminContext, AdminError, body, check_name, context, flag, known_clusters, namespaces_of, no_content,
                     require_namespace, require_tenant, update_record)

#: Pulsar's BundlesData: topics are not grouped in bundles here, so one bundle covers the whole hash range.
BUNDLES = {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}
RATE_FIELDS = ("publishMaxMessageRate", "topicDispatchRate", "subscriptionDispatchRate")  # rate_policies.py


def _policies(stored: dict, local_cluster: str) -> dict:
    """Pulsar's Policies JSON (the subset this broker keeps) from the stored record."""
    return {
        REPLICATION_FIELD: stored.get(REPLICATION_FIELD) or [local_cluster],
        "bundles": BUNDLES,
        "retention_policies": stored.get("retention_policies"),
        "deduplicationEnabled": stored.get("deduplicationEnabled"),
        "schema_compatibility_strategy": stored.get("schema_compatibility_strategy") or "UNDEFINED",
        "is_allow_auto_update_schema": stored.get("is_allow_auto_update_schema", True),
        "schema_auto_update_compatibility_strategy": stored.get("schema_auto_update_compatibility_strategy") or "Full",
        OVERRIDE_FIELD: stored.get(OVERRIDE_FIELD),
        AUTH_FIELD: auth_policies(stored),
        **{field: stored.get(field) or {} for field in RATE_FIELDS},
        "deleted": False,
    }


def _names(request: web.Request) -> tuple[str, str]:
    return request.match_info["tenant"], request.match_info["namespace"]


async def list_namespaces(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant = request.match_info["tenant"]
    await require_tenant(ctx.meta, tenant)
    return web.json_response(await namespaces_of(ctx.meta, tenant))


async def create_namespace(request: web.Request) -> web.Response:
    ctx = context(request)
    await create(ctx, *_names(request), await body(request))
    return no_content()


async def create(ctx: AdminContext, tenant: str, namespace: str, policies) -> None:
    """``PUT /admin/v2/namespaces/{tenant}/{namespace}`` with the ``Policies`` body ``policies``."""
    check_name(namespace, "Namespace")
    tenant_info = await require_tenant(ctx.meta, tenant)
    stored = policies_from_body(policies, tenant, tenant_info, ctx.max_partitions,
                                local_cluster=ctx.cluster_name, known_clusters=await known_clusters(ctx))
    encoded = json.dumps(stored).encode()
    try:
        await ctx.meta.put(policies_key(tenant, namespace), encoded, expected_version_id=EXPECT_ABSENT)
    except UnexpectedVersion:
        # ``public/default`` as the broker made it yields to an explicit creation (``ledger.policies``).
        if not await replace_untouched_default(ctx.meta, policies_key(tenant, namespace), encoded):
            raise AdminError(409, "Namespace already exists") from None
    if stored.keys() & {"deduplicationEnabled", *RATE_FIELDS}:
        await refresh_policies(ctx.pulsar, tenant, namespace)


async def get_bundles(request: web.Request) -> web.Response:
    ctx = context(request)
    await require_namespace(ctx.meta, *_names(request))
    return web.json_response(BUNDLES)


async def get_namespace(request: web.Request) -> web.Response:
    ctx = context(request)
    return web.json_response(_policies(await require_namespace(ctx.meta, *_names(request)), ctx.cluster_name))


async def delete_namespace(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant, namespace = _names(request)
    await require_namespace(ctx.meta, tenant, namespace)
    names = await topics.namespace_topics(ctx, tenant, namespace)
    if names and not flag(request, "force"):
        raise AdminError(409, "Cannot delete non empty namespace")
    for name in await topics.partitioned_topics(ctx, tenant, namespace):
        await topics.delete_partitioned(ctx, name, force=True)
    for name in await topics.namespace_topics(ctx, tenant, namespace):
        await topics.delete_topic(ctx, name, force=True)
    await topic_policies.delete_namespace(ctx, tenant, namespace)
    await ctx.meta.delete(policies_key(tenant, namespace))
    return no_content()


async def _update(ctx, tenant: str, namespace: str, field: str, value) -> None:
    """Set (or with None remove) one policy by compare-and-set on the record read."""
    def change(stored: dict) -> dict:
        if value is None:
            stored.pop(field, None)
        else:
            stored[field] = value
        return stored

    await require_tenant(ctx.meta, tenant)
    await update_record(ctx.meta, policies_key(tenant, namespace), change, what="Namespace")


def _field_getter(field: str):
    async def get(request: web.Request) -> web.Response:
        ctx = context(request)
        stored = await require_namespace(ctx.meta, *_names(request))
        if stored.get(field) is None:
            return no_content()  # Pulsar answers an unset policy with an empty body
        return web.json_response(stored[field])
    return get


def _field_remover(field: str):
    async def remove(request: web.Request) -> web.Response:
        ctx = context(request)
        await _update(ctx, *_names(request), field, None)
        if field in ("deduplicationEnabled", persistence.FIELD):  # loaded topics apply the change at once
            await refresh_policies(ctx.pulsar, *_names(request))
        return no_content()
    return remove


async def set_retention(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant, namespace = _names(request)
    value = retention.validate(await body(request))
    await _update(ctx, tenant, namespace, "retention_policies", value)
    # Applied at once in the background, then by the periodic pass.
    task = spawn(retention.enforce_namespace(ctx, tenant, namespace), f"retention of {tenant}/{namespace}")
    ctx.tasks.append(task)
    task.add_done_callback(lambda t: ctx.tasks.remove(t) if t in ctx.tasks else None)
    return no_content()


async def set_deduplication(request: web.Request) -> web.Response:
    ctx = context(request)
    value = await body(request)
    if not isinstance(value, bool):
        raise AdminError(400, "The deduplication policy must be true or false")
    await _update(ctx, *_names(request), "deduplicationEnabled", value)
    await refresh_policies(ctx.pulsar, *_names(request))  # loaded topics apply it at once
    return no_content()


async def set_persistence(request: web.Request) -> web.Response:
    """Pulsar's persistence policies (ensemble, write and ack quorum) and Nereus' ``walProfile``."""
    ctx = context(request)
    value = await topic_policies.persistence_body(request)
    await _update(ctx, *_names(request), persistence.FIELD, value)
    await refresh_policies(ctx.pulsar, *_names(request))  # later appends of loaded topics go to the new WAL
    return no_content()


async def set_auto_creation(request: web.Request) -> web.Response:
    """Pulsar's ``autoTopicCreationOverride``: whether and how a missing topic is created on first use."""
    ctx = context(request)
    value = auto_creation(await body(request), ctx.max_partitions)
    await _update(ctx, *_names(request), OVERRIDE_FIELD, value)
    return no_content()


async def get_replication(request: web.Request) -> web.Response:
    """The clusters the namespace's topics replicate to (unset: only the local one, as Pulsar defaults it)."""
    ctx = context(request)
    stored = await require_namespace(ctx.meta, *_names(request))
    return web.json_response(stored.get(REPLICATION_FIELD) or [ctx.cluster_name])


async def set_replication(request: web.Request) -> web.Response:
    """Pulsar's ``setNamespaceReplicationClusters``: a JSON list of known clusters the tenant allows."""
    ctx = context(request)
    tenant, namespace = _names(request)
    given = await body(request)
    tenant_info = await require_tenant(ctx.meta, tenant)
    await require_namespace(ctx.meta, tenant, namespace)
    clusters = replication_clusters_of(given, tenant=tenant, allowed=tenant_info.get("allowedClusters") or
                                       [ctx.cluster_name], known=await known_clusters(ctx))
    await _update(ctx, tenant, namespace, REPLICATION_FIELD, clusters)
    await refresh_policies(ctx.pulsar, tenant, namespace)  # loaded topics start or stop replicating at once
    return no_content()


async def get_strategy(request: web.Request) -> web.Response:
    ctx = context(request)
    stored = await require_namespace(ctx.meta, *_names(request))
    return web.json_response(stored.get("schema_compatibility_strategy") or "UNDEFINED")


async def set_strategy(request: web.Request) -> web.Response:
    ctx = context(request)
    value = await body(request)
    if value not in STRATEGIES + ("UNDEFINED",):
        raise AdminError(400, f"Unknown schema compatibility strategy {value!r}")
    await _update(ctx, *_names(request), "schema_compatibility_strategy", None if value == "UNDEFINED" else value)
    return no_content()


async def get_auto_update(request: web.Request) -> web.Response:
    ctx = context(request)
    stored = await require_namespace(ctx.meta, *_names(request))
    return web.json_response(stored.get("is_allow_auto_update_schema", True))


async def set_auto_update(request: web.Request) -> web.Response:
    ctx = context(request)
    value = await body(request)
    if not isinstance(value, bool):
        raise AdminError(400, "isAllowAutoUpdateSchema must be true or false")
    await _update(ctx, *_names(request), "is_allow_auto_update_schema", value)
    return no_content()


async def get_auto_update_strategy(request: web.Request) -> web.Response:
    ctx = context(request)
    stored = await require_namespace(ctx.meta, *_names(request))
    return web.json_response(stored.get("schema_auto_update_compatibility_strategy") or "Full")


async def set_auto_update_strategy(request: web.Request) -> web.Response:
    """Pulsar's older policy; the schemaCompatibilityStrategy policy wins when both are set."""
    ctx = context(request)
    value = await body(request)
    if not isinstance(value, str) or value not in AUTO_UPDATE_STRATEGIES:
        raise AdminError(400, f"Unknown schema auto update compatibility strategy {value!r} "
                              f"(one of {', '.join(AUTO_UPDATE_STRATEGIES)})")
    await _update(ctx, *_names(request), "schema_auto_update_compatibility_strategy", value)
    return no_content()


async def list_topics(request: web.Request) -> web.Response:
    """The namespace's topics of ``mode`` (PERSISTENT, the default, NON_PERSISTENT or ALL), as Pulsar lists them."""
    ctx = context(request)
    tenant, namespace = _names(request)
    await require_namespace(ctx.meta, tenant, namespace)
    domains = {"NON_PERSISTENT": ("non-persistent",), "ALL": ("persistent", "non-persistent")}.get(
        request.query.get("mode", "PERSISTENT").upper(), ("persistent",))
    return web.json_response([str(n) for n in await topics.namespace_topics(ctx, tenant, namespace, domains)])


def add_routes(router: web.UrlDispatcher) -> None:
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    router.add_get("/admin/v2/namespaces/{tenant}", list_namespaces)
    router.add_put(ns, create_namespace)
    router.add_get(ns, get_namespace)
    router.add_delete(ns, delete_namespace)
    router.add_get(ns + "/topics", list_topics)
    router.add_get(ns + "/bundles", get_bundles)
    router.add_get(ns + "/retention", _field_getter("retention_policies"))
    router.add_post(ns + "/retention", set_retention)
    router.add_delete(ns + "/retention", _field_remover("retention_policies"))
    router.add_get(ns + "/deduplication", _field_getter("deduplicationEnabled"))
    router.add_post(ns + "/deduplication", set_deduplication)
    router.add_delete(ns + "/deduplication", _field_remover("deduplicationEnabled"))
    router.add_get(ns + "/persistence", _field_getter(persistence.FIELD))
    router.add_post(ns + "/persistence", set_persistence)
    router.add_delete(ns + "/persistence", _field_remover(persistence.FIELD))
    router.add_get(ns + "/autoTopicCreation", _field_getter(OVERRIDE_FIELD))
    router.add_post(ns + "/autoTopicCreation", set_auto_creation)
    router.add_delete(ns + "/autoTopicCreation", _field_remover(OVERRIDE_FIELD))
    router.add_get(ns + "/replication", get_replication)
    router.add_post(ns + "/replication", set_replication)
    router.add_get(ns + "/schemaCompatibilityStrategy", get_strategy)
    router.add_put(ns + "/schemaCompatibilityStrategy", set_strategy)
    router.add_get(ns + "/isAllowAutoUpdateSchema", get_auto_update)
    router.add_post(ns + "/isAllowAutoUpdateSchema", set_auto_update)
    router.add_get(ns + "/schemaAutoUpdateCompatibilityStrategy", get_auto_update_strategy)
    router.add_put(ns + "/schemaAutoUpdateCompatibilityStrategy", set_auto_update_strategy)
