"""Rate policies: ``publishRate``, ``dispatchRate`` and ``subscriptionDispatchRate`` (GET, POST, DELETE)
on ``/admin/v2/namespaces/{tenant}/{namespace}/...`` and ``/admin/v2/persistent/{tenant}/{namespace}/{topic}/...``.

Bodies are Pulsar's ``PublishRate`` (``publishThrottlingRateInMsg``,
``publishThrottlingRateInByte``) and ``DispatchRate`` (``dispatchThrottlingRateInMsg``,
``dispatchThrottlingRateInByte``, ``ratePeriodInSecond``, ``relativeToPublishRate``); a
value <= 0 does not limit. The namespace record keeps them per cluster
(``publishMaxMessageRate``, ``topicDispatchRate``, ``subscriptionDispatchRate``), the topic
record under ``TopicPolicies``' names; a topic's own policy overrides its namespace's.
The loaded topics apply a change at once (``nereus.topics.throttle`` buckets): over the
publish rate a producer's connection is not read for a while, over a dispatch rate the
subscription's dispatcher waits.
"""

from __future__ import annotations

import json

from aiohttp import web

from ...pulsar.server.topics import refresh_policies
from ...ledger.policies import policies_key, topic_policies_key
from .common import DEFAULT_CLUSTER, AdminError, body, context, flag, no_content, require_namespace, require_tenant, \
    update_record
from .topic_policies import require_policy_topic, set_policy

_LONG = (-(1 << 63), (1 << 63) - 1)


def _number(value: dict, field: str, default, low: int = -1):
    given = value.get(field, default)
    if not isinstance(given, int) or isinstance(given, bool) or not low <= given <= _LONG[1]:
        raise AdminError(400, f"{field} must be an integer >= {low}")
    return given


def _publish_rate(value) -> dict:
    if not isinstance(value, dict):
        raise AdminError(400, "The publish rate must be a JSON object (PublishRate)")
    return {"publishThrottlingRateInMsg": _number(value, "publishThrottlingRateInMsg", -1),
            "publishThrottlingRateInByte": _number(value, "publishThrottlingRateInByte", -1)}


def _dispatch_rate(value) -> dict:
    if not isinstance(value, dict):
        raise AdminError(400, "The dispatch rate must be a JSON object (DispatchRate)")
    relative = value.get("relativeToPublishRate", False)
    if not isinstance(relative, bool):
        raise AdminError(400, "relativeToPublishRate must be true or false")
    return {"dispatchThrottlingRateInMsg": _number(value, "dispatchThrottlingRateInMsg", -1),
            "dispatchThrottlingRateInByte": _number(value, "dispatchThrottlingRateInByte", -1),
            "relativeToPublishRate": relative,
            "ratePeriodInSecond": _number(value, "ratePeriodInSecond", 1, low=1)}


#: path suffix -> (namespace Policies field, TopicPolicies field, validator)
POLICIES = {
    "publishRate": ("publishMaxMessageRate", "publishRate", _publish_rate),
    "dispatchRate": ("topicDispatchRate", "dispatchRate", _dispatch_rate),
    "subscriptionDispatchRate": ("subscriptionDispatchRate", "subscriptionDispatchRate", _dispatch_rate),
}


def _names(request: web.Request) -> tuple[str, str]:
    return request.match_info["tenant"], request.match_info["namespace"]


def _namespace_handlers(field: str, validate):
    async def get(request: web.Request) -> web.Response:
        stored = await require_namespace(context(request).meta, *_names(request))
        per_cluster = stored.get(field) or {}
        value = per_cluster.get(DEFAULT_CLUSTER) or next(iter(per_cluster.values()), None)
        return web.json_response(value) if value is not None else no_content()

    async def change(request: web.Request, value) -> web.Response:
        ctx = context(request)
        tenant, namespace = _names(request)

        def apply(stored: dict) -> dict:
            if value is None:
                stored.pop(field, None)
            else:
                stored[field] = {DEFAULT_CLUSTER: value}
            return stored

        await require_tenant(ctx.meta, tenant)
        await update_record(ctx.meta, policies_key(tenant, namespace), apply, what="Namespace")
        await refresh_policies(ctx.pulsar, tenant, namespace)  # loaded topics apply it at once
        return no_content()

    async def post(request: web.Request) -> web.Response:
        return await change(request, validate(await body(request)))

    async def delete(request: web.Request) -> web.Response:
        return await change(request, None)

    return get, post, delete


def _topic_handlers(namespace_field: str, field: str, validate):
    async def get(request: web.Request) -> web.Response:
        ctx = context(request)
        name = await require_policy_topic(ctx, request)
        raw = await ctx.meta.get(topic_policies_key(name.tenant, name.namespace, name.local))
        own = json.loads(raw.value).get(field) if raw is not None else None
        if own is not None:
            return web.json_response(own)
        if flag(request, "applied"):
            per_cluster = (await require_namespace(ctx.meta, name.tenant, name.namespace)).get(namespace_field) or {}
            value = next(iter(per_cluster.values()), None)
            if value is not None:
                return web.json_response(value)
        return no_content()

    async def change(request: web.Request, value) -> web.Response:
        ctx = context(request)
        name = await require_policy_topic(ctx, request)
        await set_policy(ctx, name, field, value)
        await refresh_policies(ctx.pulsar, name.tenant, name.namespace)
        return no_content()

    async def post(request: web.Request) -> web.Response:
        return await change(request, validate(await body(request)))

    async def delete(request: web.Request) -> web.Response:
        return await change(request, None)

    return get, post, delete


def add_routes(router: web.UrlDispatcher) -> None:
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/"
    topic = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/"
    for suffix, (namespace_field, topic_field, validate) in POLICIES.items():
        get, post, delete = _namespace_handlers(namespace_field, validate)
        router.add_get(ns + suffix, get)
        router.add_post(ns + suffix, post)
        router.add_delete(ns + suffix, delete)
        get, post, delete = _topic_handlers(namespace_field, topic_field, validate)
        router.add_get(topic + suffix, get)
        router.add_post(topic + suffix, post)
        router.add_delete(topic + suffix, delete)


__all__ = ["POLICIES", "add_routes"]
