"""``PUT /admin/v2/namespaces/{tenant}/{namespace}/unload`` (and ``.../{bundle}/unload``).

What ``pulsar-admin namespaces unload`` calls: every topic of the namespace is
unloaded at its owner (clients reconnect and look it up again; in a cluster it may
move). Nereus has one bundle per namespace, so a bundle's unload is the namespace's.
"""

from __future__ import annotations

import logging

import aiohttp
from aiohttp import web
from yarl import URL

from ...ledger.naming import TopicName
from ...topics import NotOwner
from .common import AdminError, context, no_content, require_namespace
from .routing import FAN_OUT_TIMEOUT, _url
from .topics import unload_here

log = logging.getLogger(__name__)


async def unload_namespace(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant, namespace = request.match_info["tenant"], request.match_info["namespace"]
    await require_namespace(ctx.meta, tenant, namespace)
    prefix = f"persistent://{tenant}/{namespace}/"
    here, elsewhere = [], []
    for stream in await ctx.storage.list_streams(prefix):
        name = TopicName.parse(stream)
        try:
            owner = await ctx.placement.owner(stream)
        except NotOwner:
            continue  # moving now: its next owner loads it afresh
        if owner.name == ctx.placement.local.name:
            here.append(name)
        else:
            elsewhere.append((name, owner))
    for name in here:
        await unload_here(ctx, name)
    if elsewhere:
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FAN_OUT_TIMEOUT)) as session:
                for name, owner in elsewhere:
                    async with session.put(URL(_url(owner, name, "/unload", {}), encoded=True)) as response:
                        if response.status >= 400 and response.status != 404:  # 404: deleted meanwhile
                            raise AdminError(response.status, f"unloading {name} failed: {await response.text()}")
        except aiohttp.ClientError as exc:
            raise AdminError(502, f"A topic's broker did not answer: {exc}") from None
    log.info("namespace %s/%s unloaded through the admin API (%d topics)", tenant, namespace,
             len(here) + len(elsewhere))
    return no_content()


def add_routes(router: web.UrlDispatcher) -> None:
    ns = "/admin/v2/namespaces/{tenant}/{namespace}"
    router.add_put(ns + "/unload", unload_namespace)
    router.add_put(ns + "/{bundle}/unload", unload_namespace)


__all__ = ["add_routes"]
