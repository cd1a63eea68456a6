"""``/admin/v2/tenants``: list, create, get, update, delete (``public`` always exists; creating it
replaces the broker's own default while nobody changed it: ``ledger.policies``).

A tenant's ``allowedClusters`` must name known clusters (the local one or one with a record;
else 412 "Clusters do not exist", as Pulsar answers); without any, the local cluster.
"""

from __future__ import annotations

import json

from aiohttp import web

from ...ledger.policies import replace_untouched_default
from ...meta import EXPECT_ABSENT, UnexpectedVersion
from .common import (TENANTS_ROOT, AdminContext, AdminError, body, check_name, context,
                     known_clusters, list_children, namespaces_of, no_content, require_tenant, tenant_key,
                     update_record)


def _tenant_info(value, local_cluster: str) -> dict:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise AdminError(400, "The tenant info must be a JSON object")
    roles = value.get("adminRoles") or []
    clusters = value.get("allowedClusters") or [local_cluster]
    if not isinstance(roles, list) or not isinstance(clusters, list) or not all(
            isinstance(x, str) for x in roles + clusters):
        raise AdminError(400, "adminRoles and allowedClusters must be lists of strings")
    return {"adminRoles": sorted(set(roles)), "allowedClusters": sorted(set(clusters))}


async def _checked_tenant_info(ctx: AdminContext, value) -> dict:
    """The body as a tenant record; 412 when it allows a cluster this broker does not know."""
    info = _tenant_info(value, ctx.cluster_name)
    if not set(info["allowedClusters"]) <= await known_clusters(ctx):
        raise AdminError(412, "Clusters do not exist")
    return info


async def list_tenants(request: web.Request) -> web.Response:
    ctx = context(request)
    return web.json_response(sorted(await list_children(ctx.meta, TENANTS_ROOT)))


async def get_tenant(request: web.Request) -> web.Response:
    ctx = context(request)
    return web.json_response(await require_tenant(ctx.meta, request.match_info["tenant"]))


async def create_tenant(request: web.Request) -> web.Response:
    ctx = context(request)
    await create(ctx, request.match_info["tenant"], await body(request))
    return no_content()


async def create(ctx: AdminContext, tenant: str, info) -> None:
    """``PUT /admin/v2/tenants/{tenant}`` with the tenant info ``info`` (409 when it exists)."""
    check_name(tenant, "Tenant")
    checked = json.dumps(await _checked_tenant_info(ctx, info)).encode()
    try:
        await ctx.meta.put(tenant_key(tenant), checked, expected_version_id=EXPECT_ABSENT)
    except UnexpectedVersion:
        if not await replace_untouched_default(ctx.meta, tenant_key(tenant), checked):
            raise AdminError(409, "Tenant already exists") from None


async def update_tenant(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant = request.match_info["tenant"]
    info = await _checked_tenant_info(ctx, await body(request))
    # On the version read: a tenant deleted meanwhile is not brought back.
    await update_record(ctx.meta, tenant_key(tenant), lambda _stored: info, what="Tenant")
    return no_content()


async def delete_tenant(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant = request.match_info["tenant"]
    await require_tenant(ctx.meta, tenant)
    if await namespaces_of(ctx.meta, tenant):
        raise AdminError(409, "The tenant still has active namespaces")
    await ctx.meta.delete(tenant_key(tenant))
    return no_content()


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/tenants", list_tenants)
    router.add_get("/admin/v2/tenants/{tenant}", get_tenant)
    router.add_put("/admin/v2/tenants/{tenant}", create_tenant)
    router.add_post("/admin/v2/tenants/{tenant}", update_tenant)
    router.add_delete("/admin/v2/tenants/{tenant}", delete_tenant)
