"""Pulsar's HTTP lookup: ``GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}``.

Clients given an ``http://`` service URL find a topic's broker here (the binary
protocol's LOOKUP answers the same question over ``pulsar://``). The answer is
Pulsar's ``LookupData`` of the topic's owner. When nobody owns the topic yet and
the ring gives it to another broker, the answer is a 307 to that broker's same
lookup URL with ``authoritative=true``: that broker then takes the topic (as a
Pulsar broker redirects; the official clients' HTTP lookup follows redirects).
A topic whose owner just died answers 503 until it has moved; a topic of a missing
tenant or namespace, or one the auto-creation rule does not create, 404. ``?listenerName=``
(or the ``X-Pulsar-ListenerName`` header) picks the advertised listener whose URLs
are answered; one the broker does not have is an error. The transaction coordinators'
topic (``transactions.TC_ASSIGN_TOPIC``) is answered by every broker itself.
"""

from __future__ import annotations

from aiohttp import web

from ...ledger.naming import InvalidTopicName, TopicName
from ...pulsar.server import transactions
from ...pulsar.server.existence import TopicMissing, check_usable
from ...topics import NotOwner, UnknownListener
from .common import AdminError, context, flag


def lookup_data(pulsar_url: str, http_url: str, pulsar_tls_url: str = "", https_url: str = "") -> dict:
    """Pulsar's ``LookupData`` (TLS URLs empty, but present as clients require, when TLS is off)."""
    return {"brokerUrl": pulsar_url, "brokerUrlTls": pulsar_tls_url, "httpUrl": http_url, "httpUrlTls": https_url,
            "nativeUrl": pulsar_url}


async def lookup_topic(request: web.Request) -> web.Response:
    ctx = context(request)
    m = request.match_info
    try:
        name = TopicName.parse(f"{m['domain']}://{m['tenant']}/{m['namespace']}/{m['topic']}")
    except InvalidTopicName:
        raise AdminError(412, "Topic name is not valid") from None
    listener = request.query.get("listenerName") or request.headers.get("X-Pulsar-ListenerName") or None
    if transactions.is_tc_topic(name):  # a transaction coordinator: every broker serves them
        if ctx.pulsar.transactions is None or name.partition_index >= transactions.TC_COUNT:
            raise AdminError(404, f"no transaction coordinator serves {name}")
        try:
            pulsar_url, http_url = ctx.placement.local.urls_for(listener)
            tls_urls = ctx.placement.local.tls_urls_for(listener)
        except UnknownListener as exc:
            raise AdminError(500, str(exc)) from None
        return web.json_response(lookup_data(pulsar_url if listener else ctx.pulsar.service_url, http_url,
                                             *tls_urls))
    try:  # a missing tenant or namespace, or a topic the rule in force does not create: as the binary lookup
        await check_usable(ctx.pulsar, name)
    except TopicMissing as exc:
        raise AdminError(404, str(exc)) from None
    placement = ctx.placement
    try:
        broker, final = await placement.lookup(str(name), authoritative=flag(request, "authoritative"))
    except NotOwner as exc:
        raise AdminError(503, str(exc)) from None
    try:
        pulsar_url, http_url = broker.urls_for(listener)
        tls_urls = broker.tls_urls_for(listener)
    except UnknownListener as exc:
        raise AdminError(500, str(exc)) from None  # as Pulsar answers it
    if broker.name == placement.local.name:
        return web.json_response(lookup_data(pulsar_url if listener else ctx.pulsar.service_url, http_url,
                                             *tls_urls))
    if not final:  # the redirect keeps the query, listenerName included, and the scheme the client came by
        target = request.rel_url.update_query(authoritative="true")
        base = broker.https_url if request.secure and broker.https_url else http_url
        raise web.HTTPTemporaryRedirect(base + str(target))
    return web.json_response(lookup_data(pulsar_url, http_url, *tls_urls))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/lookup/v2/topic/{domain:persistent|non-persistent}/{tenant}/{namespace}/{topic}",
                   lookup_topic)


__all__ = ["add_routes", "lookup_data", "lookup_topic"]
