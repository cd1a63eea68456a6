"""Topic admin calls are answered by the topic's owner (a middleware of the admin app).

A topic's in-memory state (loaded subscriptions, rates, connected clients, the
append session) lives on the one broker that owns it. So a call under
``/admin/v2/persistent/{tenant}/{namespace}/{topic}`` that reads or changes that
state, asked at another broker, answers 307 with the owner's URL for the same
path and query (as a Pulsar broker does; ``pulsar-admin`` and ``requests`` follow
it). Nobody owns it yet: the broker the ring gives it to, with
``authoritative=true`` so that it takes the topic even if its ring view differs
for a moment (no ping-pong). Its owner just died: 503 until it has moved.

A partitioned topic has no owner, its partitions do, possibly several brokers.
Calls that apply to every partition (subscriptions, reset by time, skip all,
trim, unload, partitioned stats, delete) are then fanned out as the same call on each
partition at its owner, and the answers combined. While every partition is local
(always on a single broker) the handler runs as before.
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import quote

import aiohttp
from aiohttp import web
from yarl import URL

from ...ledger.naming import TopicName
from ...topics import BrokerAddress, NotOwner
from ...topics import partitions_of
from . import compaction, stats
from .common import CONTEXT, AdminContext, AdminError, flag

log = logging.getLogger(__name__)

TOPIC_ROUTE = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
#: Calls on metadata only: any broker answers them.
ANYWHERE = {("PUT", ""), ("GET", "/partitions"), ("PUT", "/partitions"), ("POST", "/partitions"),
            ("GET", "/retention"), ("POST", "/retention"), ("DELETE", "/retention"),
            ("GET", "/persistence"), ("POST", "/persistence"), ("DELETE", "/persistence"),
            ("GET", "/replication"), ("POST", "/replication"), ("DELETE", "/replication"),
            ("GET", "/compactionThreshold"), ("POST", "/compactionThreshold"), ("PUT", "/compactionThreshold"),
            ("DELETE", "/compactionThreshold"),
            ("GET", "/permissions"), ("POST", "/permissions/{role}"), ("DELETE", "/permissions/{role}")}
#: Calls on a partitioned topic that apply to each partition: (method, route suffix) -> the partition's suffix.
PER_PARTITION = {
    ("GET", "/subscriptions"): "/subscriptions",
    ("PUT", "/subscription/{subscription}"): None,
    ("DELETE", "/subscription/{subscription}"): None,
    ("POST", "/subscription/{subscription}/resetcursor/{timestamp}"): None,
    ("POST", "/subscription/{subscription}/skip_all"): None,
    ("POST", "/trim"): None,
    ("PUT", "/unload"): None,
    ("GET", "/partitioned-stats"): "/stats",
    ("DELETE", "/partitions"): "",
    ("PUT", "/compaction"): None,
    ("GET", "/compaction"): None,
}
FAN_OUT_TIMEOUT = 60.0


def _route_suffix(request: web.Request) -> str | None:
    """The route below a topic's path (``/stats``, ``/subscription/{subscription}``, ...); None: not a topic call."""
    resource = getattr(request.match_info.route, "resource", None)
    canonical = resource.canonical if resource is not None else ""
    return canonical[len(TOPIC_ROUTE):] if canonical.startswith(TOPIC_ROUTE) else None


def _path_rest(request: web.Request) -> str:
    """The request's raw path below the topic (``/subscription/s1``), as sent."""
    path = request.raw_path.split("?", 1)[0]
    segments = path.split("/", 7)  # '', admin, v2, persistent, tenant, namespace, topic, rest
    return "/" + segments[7] if len(segments) > 7 else ""


def _url(broker: BrokerAddress, name: TopicName, rest: str, query) -> str:
    """The call at ``broker``; ``authoritative``: take the topic if nobody owns it (its ring may differ)."""
    query = {**query, "authoritative": "true"}
    path = f"/admin/v2/{name.domain}/{quote(name.tenant, safe='')}/{quote(name.namespace, safe='')}/" \
           f"{quote(name.local, safe='')}{rest}"
    return str(URL(broker.http_url + path, encoded=True).with_query(query))


async def _where(ctx: AdminContext, name: TopicName, authoritative: bool) -> BrokerAddress:
    """The owner, else the broker that should take the topic (this one, if sent here authoritatively)."""
    try:
        if authoritative:
            return (await ctx.placement.lookup(str(name), authoritative=True))[0]
        return await ctx.placement.owner(str(name))
    except NotOwner as exc:
        raise AdminError(503, str(exc)) from None


@web.middleware
async def to_owner(request: web.Request, handler):
    ctx = request.app[CONTEXT]
    suffix = _route_suffix(request)
    if suffix is None or not ctx.ready or (request.method, suffix) in ANYWHERE:
        return await handler(request)
    m = request.match_info
    name = TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
    if name.partition_index < 0:
        count = await partitions_of(ctx.meta, name)
        if count:
            if (request.method, suffix) not in PER_PARTITION:
                return await handler(request)  # refused or answered from metadata alone
            return await _fan_out(ctx, request, handler, name, count, suffix)
    broker = await _where(ctx, name, flag(request, "authoritative"))
    if broker.name == ctx.placement.local.name:
        return await handler(request)
    raise web.HTTPTemporaryRedirect(_url(broker, name, _path_rest(request), request.query))


async def _fan_out(ctx: AdminContext, request: web.Request, handler, name: TopicName, count: int,
                   suffix: str) -> web.StreamResponse:
    parts = [name.partition(i) for i in range(count)]
    local = ctx.placement.local.name
    where = [await _where(ctx, part, False) for part in parts]
    if all(broker.name == local for broker in where):
        return await handler(request)
    rest = PER_PARTITION[(request.method, suffix)]
    rest = _path_rest(request) if rest is None else rest
    query = {k: v for k, v in request.query.items() if k not in ("authoritative", "perPartition")}
    data = await request.read()

    async def call(session: aiohttp.ClientSession, part: TopicName, broker: BrokerAddress):
        async with session.request(request.method, URL(_url(broker, part, rest, query), encoded=True),
                                   data=data or None,
                                   headers={"Content-Type": "application/json"}) as response:
            body = await response.read()
            return response.status, (json.loads(body) if body else None)

    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FAN_OUT_TIMEOUT)) as session:
            answers = await asyncio.gather(*(call(session, part, broker) for part, broker in zip(parts, where)))
    except aiohttp.ClientError as exc:
        raise AdminError(502, f"A partition's broker did not answer: {exc}") from None
    failed = [(status, value) for status, value in answers if status >= 400]
    if (request.method, suffix) == ("GET", "/compaction"):
        errors = [(status, value) for status, value in failed if status != 404]  # 404: a partition never written
        if errors:
            return web.json_response(errors[0][1], status=errors[0][0])
        return web.json_response(compaction.aggregate([value for status, value in answers if status < 400]))
    if suffix == "/partitioned-stats":
        if failed:
            return web.json_response(failed[0][1], status=failed[0][0])
        per = {str(part): value for part, (_status, value) in zip(parts, answers)}
        return web.json_response(stats.aggregate(per, per_partition=flag(request, "perPartition", default=True)))
    # A partition without the subscription (404) is fine as long as one has it; other failures win.
    errors = [(status, value) for status, value in failed if status != 404]
    if errors or len(failed) == len(answers):
        status, value = (errors or failed)[0]
        return web.json_response(value, status=status)
    if suffix == "/subscriptions":
        return web.json_response(sorted({sub for _status, value in answers for sub in value or ()}))
    if suffix == "/partitions":  # the partitions are gone: now the partitioned topic's own record
        return await handler(request)
    return web.Response(status=204)


__all__ = ["to_owner"]
