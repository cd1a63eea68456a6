"""Permissions: Pulsar's grant, revoke and list on namespaces and topics.

- ``POST /admin/v2/namespaces/{t}/{ns}/permissions/{role}`` with a JSON list of actions
  (``["produce", "consume"]``) sets the role's actions on every topic of the namespace;
  ``DELETE`` revokes them; ``GET .../permissions`` lists ``{role: [actions]}``.
- ``POST/DELETE /admin/v2/persistent/{t}/{ns}/{topic}/permissions/{role}`` do the same for
  one topic (a partitioned topic's grants hold for its partitions); its ``GET`` lists the
  namespace's grants and the topic's together, as Pulsar does.

- ``POST /admin/v2/namespaces/{t}/{ns}/permissions/subscription/{sub}`` with a JSON list of
  roles adds them to the roles allowed to use that subscription name (once a subscription has
  roles, only they may subscribe with it); ``DELETE .../permissions/{sub}/{role}`` removes one;
  ``GET .../permissions/subscription`` lists ``{subscription: [roles]}``.

Stored in the namespace policies' ``auth_policies`` (``namespace_auth``, ``destination_auth``,
``subscription_auth_roles``),
where the brokers read them on every check (``nereus.auth.authorization``).
"""

from __future__ import annotations

from aiohttp import web

from ...auth.authorization import AUTH_FIELD, InvalidActions, auth_policies, base_topic, validate_actions
from ...ledger.naming import InvalidTopicName, TopicName
from ...ledger.policies import policies_key
from .common import AdminError, body, context, no_content, require_namespace, require_tenant, update_record


def _actions(value) -> list[str]:
    try:
        return validate_actions(value)
    except InvalidActions as exc:
        raise AdminError(400, str(exc)) from None


def _topic(request: web.Request, domain: str) -> TopicName:
    m = request.match_info
    try:
        return TopicName.parse(f"{domain}://{m['tenant']}/{m['namespace']}/{m['topic']}")
    except InvalidTopicName:
        raise AdminError(412, "Topic name is not valid") from None


async def _change(ctx, tenant: str, namespace: str, change) -> None:
    """Apply ``change(auth_policies)`` to the namespace's record by compare-and-set."""
    def apply(stored: dict) -> dict:
        auth = auth_policies(stored)
        change(auth)
        stored[AUTH_FIELD] = auth
        return stored

    await require_tenant(ctx.meta, tenant)
    await update_record(ctx.meta, policies_key(tenant, namespace), apply, what="Namespace")


async def get_namespace_permissions(request: web.Request) -> web.Response:
    ctx = context(request)
    stored = await require_namespace(ctx.meta, request.match_info["tenant"], request.match_info["namespace"])
    return web.json_response(auth_policies(stored)["namespace_auth"])


async def grant_namespace(request: web.Request) -> web.Response:
    ctx = context(request)
    m = request.match_info
    actions = _actions(await body(request))
    await _change(ctx, m["tenant"], m["namespace"], lambda auth: auth["namespace_auth"].__setitem__(m["role"], actions))
    return no_content()


async def revoke_namespace(request: web.Request) -> web.Response:
    ctx = context(request)
    m = request.match_info
    await _change(ctx, m["tenant"], m["namespace"], lambda auth: auth["namespace_auth"].pop(m["role"], None))
    return no_content()


def _roles(value) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(r, str) and r for r in value):
        raise AdminError(400, "the body must be a non-empty JSON list of role names")
    return value


async def get_subscription_permissions(request: web.Request) -> web.Response:
    ctx = context(request)
    stored = await require_namespace(ctx.meta, request.match_info["tenant"], request.match_info["namespace"])
    return web.json_response({sub: sorted(roles)
                              for sub, roles in auth_policies(stored)["subscription_auth_roles"].items()})


async def grant_subscription(request: web.Request) -> web.Response:
    ctx = context(request)
    m = request.match_info
    roles = _roles(await body(request))

    def change(auth: dict) -> None:
        table = auth["subscription_auth_roles"]
        table[m["subscription"]] = sorted(set(table.get(m["subscription"]) or ()) | set(roles))

    await _change(ctx, m["tenant"], m["namespace"], change)
    return no_content()


async def revoke_subscription(request: web.Request) -> web.Response:
    ctx = context(request)
    m = request.match_info
    auth = auth_policies(await require_namespace(ctx.meta, m["tenant"], m["namespace"]))
    if m["role"] not in (auth["subscription_auth_roles"].get(m["subscription"]) or ()):
        raise AdminError(412, f"Role {m['role']} has no permission on subscription {m['subscription']}")

    def change(auth: dict) -> None:
        table = auth["subscription_auth_roles"]
        left = sorted(set(table.get(m["subscription"]) or ()) - {m["role"]})
        if left:
            table[m["subscription"]] = left
        else:  # no roles left: the subscription name is open again
            table.pop(m["subscription"], None)

    await _change(ctx, m["tenant"], m["namespace"], change)
    return no_content()


def _topic_handlers(domain: str):
    async def get_permissions(request: web.Request) -> web.Response:
        ctx = context(request)
        topic = _topic(request, domain)
        auth = auth_policies(await require_namespace(ctx.meta, topic.tenant, topic.namespace))
        merged = {role: sorted(actions) for role, actions in auth["namespace_auth"].items()}
        for role, actions in (auth["destination_auth"].get(base_topic(topic)) or {}).items():
            merged[role] = sorted(set(merged.get(role, ())) | set(actions))
        return web.json_response(merged)

    async def grant(request: web.Request) -> web.Response:
        ctx = context(request)
        topic, role = _topic(request, domain), request.match_info["role"]
        actions = _actions(await body(request))

        def change(auth: dict) -> None:
            auth["destination_auth"].setdefault(base_topic(topic), {})[role] = actions

        await _change(ctx, topic.tenant, topic.namespace, change)
        return no_content()

    async def revoke(request: web.Request) -> web.Response:
        ctx = context(request)
        topic, role = _topic(request, domain), request.match_info["role"]
        auth = auth_policies(await require_namespace(ctx.meta, topic.tenant, topic.namespace))
        if role not in (auth["destination_auth"].get(base_topic(topic)) or {}):
            raise AdminError(412, "Permissions are not set at the topic level")

        def change(auth: dict) -> None:
            grants = auth["destination_auth"].get(base_topic(topic)) or {}
            grants.pop(role, None)
            if not grants:
                auth["destination_auth"].pop(base_topic(topic), None)

        await _change(ctx, topic.tenant, topic.namespace, change)
        return no_content()

    return get_permissions, grant, revoke


def add_routes(router: web.UrlDispatcher) -> None:
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
    router.add_get(ns, get_namespace_permissions)
    router.add_get(ns + "/subscription", get_subscription_permissions)
    router.add_post(ns + "/subscription/{subscription}", grant_subscription)
    router.add_delete(ns + "/{subscription}/{role}", revoke_subscription)
    router.add_post(ns + "/{role}", grant_namespace)
    router.add_delete(ns + "/{role}", revoke_namespace)
    for domain in ("persistent", "non-persistent"):
        get_permissions, grant, revoke = _topic_handlers(domain)
        t = f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/permissions"
        router.add_get(t, get_permissions)
        router.add_post(t + "/{role}", grant)
        router.add_delete(t + "/{role}", revoke)
