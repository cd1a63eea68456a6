"""``/admin/v2/persistent/{tenant}/{namespace}[/{topic}]``: list, create, delete, partitions, trim, unload.

A non-partitioned topic (or a partition) is one stream; a partitioned topic is the
``/nereus/pulsar/partitioned`` record plus its partitions, created eagerly here so
that listings and stats show them at once (as Pulsar does).
"""

from __future__ import annotations

import json
import logging

from aiohttp import web

from ...ledger.naming import InvalidTopicName, TopicName
from ...meta import cas
from ...pulsar.server import transactions
from ...pulsar.server.existence import TopicMissing, partitions_for_client
from ...storage import StreamExists, StreamNotFound
from ...topics import create_partitioned_topic, key_log, list_partitioned_topics, partitioned_key, partitions_of, schemas
from ...topics.partitioned import ensure_stream
from . import retention, topic_policies
from .common import (AdminContext, AdminError, body, context, flag, no_content, partitions, require_namespace,
                     require_topic, stream_exists, topic_name)

log = logging.getLogger(__name__)


async def namespace_topics(ctx: AdminContext, tenant: str, namespace: str,
                           domains: tuple[str, ...] = ("persistent",)) -> list[TopicName]:
    """Non-partitioned topics and partitions of a namespace (partitions listed one by one, as Pulsar does)."""
    prefixes = tuple(f"{domain}://{tenant}/{namespace}/" for domain in domains)
    names = {TopicName.parse(n) for prefix in prefixes for n in await ctx.storage.list_streams(prefix)}
    for base in await partitioned_topics(ctx, tenant, namespace, domains):
        names.update(base.partition(i) for i in range(await partitions_of(ctx.meta, base)))
    if "non-persistent" in domains:  # those served from memory here now
        names.update(n for n in map(TopicName.parse, ctx.pulsar.registry.memory_topics) if str(n).startswith(prefixes))
    return sorted(names, key=str)


async def partitioned_topics(ctx: AdminContext, tenant: str, namespace: str,
                             domains: tuple[str, ...] = ("persistent",)) -> list[TopicName]:
    return [TopicName.parse(n) for domain in domains
            for n in await list_partitioned_topics(ctx.meta, f"{domain}://{tenant}/{namespace}/")]


def close_consumers(dispatcher) -> None:
    """Disconnect a subscription's consumers; their unacked entries are redelivered later."""
    dispatcher.topic.close_consumers(dispatcher)


async def delete_topic(ctx: AdminContext, name: TopicName, *, force: bool) -> None:
    """Delete one stream-backed topic with its subscriptions (412 while clients are connected)."""
    topic = ctx.pulsar.topics.get(str(name))
    if topic is not None:
        if topic.connected() and not force:
            raise AdminError(412, "Topic has active producers/subscriptions")
        await ctx.pulsar.registry.unload(topic.core, "deleted through the admin API")
    try:
        await key_log.delete_topic_stream(ctx.storage, str(name))
    except StreamNotFound:
        if topic is None:
            raise AdminError(404, "Topic not found") from None
    log.info("topic %s deleted", name)


async def delete_partitioned(ctx: AdminContext, name: TopicName, *, force: bool) -> None:
    count = await partitions_of(ctx.meta, name)
    if not count:
        raise AdminError(404, "Partitioned topic does not exist")
    parts = [name.partition(i) for i in range(count)]
    if not force:
        for part in parts:
            topic = ctx.pulsar.topics.get(str(part))
            if topic is not None and topic.connected():
                raise AdminError(412, "Topic has active producers/subscriptions")
    for part in parts:
        try:
            await delete_topic(ctx, part, force=force)
        except AdminError as exc:
            if exc.status != 404:
                raise
    await ctx.meta.delete(partitioned_key(name))
    await schemas.delete(ctx.meta, name, force=True)
    await topic_policies.delete_all(ctx, name)


async def _create_streams(ctx: AdminContext, names: list[TopicName]) -> None:
    for name in names:
        await ensure_stream(ctx.storage, str(name))


def _partition_count(value, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise AdminError(400, "The body must be the number of partitions")
    if value <= 0:
        raise AdminError(406, "Number of partitions should be more than 0")
    if value > limit:  # maxNumPartitionsPerPartitionedTopic, refused as Pulsar refuses it
        raise AdminError(406, f"Number of partitions should be less than or equal to {limit}")
    return value


# -- handlers -----------------------------------------------------------------------------
async def list_topics(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant, namespace = request.match_info["tenant"], request.match_info["namespace"]
    await require_namespace(ctx.meta, tenant, namespace)
    return web.json_response([str(n) for n in await namespace_topics(ctx, tenant, namespace)])


async def list_partitioned(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant, namespace = request.match_info["tenant"], request.match_info["namespace"]
    await require_namespace(ctx.meta, tenant, namespace)
    return web.json_response([str(n) for n in await partitioned_topics(ctx, tenant, namespace)])


async def create_topic(request: web.Request) -> web.Response:
    await create_non_partitioned(context(request), topic_name(request))
    return no_content()


async def create_non_partitioned(ctx: AdminContext, name: TopicName) -> None:
    """``PUT /admin/v2/persistent/{tenant}/{namespace}/{topic}``: one stream (409 when the topic exists)."""
    await require_namespace(ctx.meta, name.tenant, name.namespace)
    if await partitions_of(ctx.meta, name):
        raise AdminError(409, "This topic already exists")
    try:
        await ctx.storage.create_stream(str(name))
    except StreamExists:
        raise AdminError(409, "This topic already exists") from None


async def delete(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request)
    if await partitions_of(ctx.meta, name):
        raise AdminError(409, "Topic is partitioned: delete it with DELETE .../partitions")
    await delete_topic(ctx, name, force=flag(request, "force"))
    if name.partition_index < 0:  # a partition shares its partitioned topic's schema and policies
        await schemas.delete(ctx.meta, name, force=True)
        await topic_policies.delete_all(ctx, name)
    return no_content()


async def create_partitioned(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request)
    await create_partitioned_with_partitions(ctx, name, await body(request))
    return no_content()


async def create_partitioned_with_partitions(ctx: AdminContext, name: TopicName, partition_count) -> None:
    """``PUT .../{topic}/partitions`` with the body ``partition_count``: the partitioned topic's record,
    then a stream per partition (409 when the topic exists)."""
    count = _partition_count(partition_count, ctx.max_partitions)
    if name.partition_index >= 0:
        raise AdminError(412, "A partition cannot itself be partitioned")
    await require_namespace(ctx.meta, name.tenant, name.namespace)
    if await stream_exists(ctx.storage, name):
        raise AdminError(409, "This topic already exists")
    if not await create_partitioned_topic(ctx.meta, name, count):
        raise AdminError(409, "Partitioned topic already exists")
    await _create_streams(ctx, [name.partition(i) for i in range(count)])


async def update_partitioned(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request)
    count = _partition_count(await body(request), ctx.max_partitions)
    current = await partitions_of(ctx.meta, name)
    if not current:
        raise AdminError(404, "Partitioned topic does not exist")
    if count <= current:
        raise AdminError(422, "Number of new partitions must be greater than existing number of partitions")

    def grow(old: bytes | None) -> bytes:
        if old is None:
            raise AdminError(404, "Partitioned topic does not exist")
        value = json.loads(old)
        value["partitions"] = max(value["partitions"], count)
        return json.dumps(value).encode()

    # Streams first: a client that sees the new count finds its partitions.
    await _create_streams(ctx, [name.partition(i) for i in range(current, count)])
    await cas.update(ctx.meta, partitioned_key(name), grow)
    return no_content()


async def get_partitions(request: web.Request) -> web.Response:
    """Partitioned metadata; ``checkAllowAutoCreation=true`` (what HTTP-lookup clients send) applies the
    auto-creation rule as the binary protocol's PARTITIONED_METADATA does: a partitioned topic may be
    created, a missing namespace or a topic that may not be created is 404."""
    ctx = context(request)
    name = topic_name(request)
    return web.json_response({"partitions": await _client_partitions(ctx, request, name), "deleted": False})


async def _client_partitions(ctx, request: web.Request, name: TopicName) -> int:
    if transactions.is_tc_topic(name):  # one partition per transaction coordinator
        return transactions.TC_COUNT if ctx.pulsar.transactions is not None and name.partition_index < 0 else 0
    if not flag(request, "checkAllowAutoCreation"):
        return await partitions_of(ctx.meta, name)
    try:
        return await partitions_for_client(ctx.pulsar, name, may_create=True)
    except TopicMissing as exc:
        raise AdminError(404, str(exc)) from None


async def get_non_persistent_partitions(request: web.Request) -> web.Response:
    """Partitioned metadata of a non-persistent topic (what HTTP-lookup clients ask before they connect)."""
    ctx = context(request)
    m = request.match_info
    try:
        name = TopicName.parse(f"non-persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
    except InvalidTopicName:
        raise AdminError(412, "Topic name is not valid") from None
    return web.json_response({"partitions": await _client_partitions(ctx, request, name), "deleted": False})


async def delete_partitioned_topic(request: web.Request) -> web.Response:
    ctx = context(request)
    await delete_partitioned(ctx, topic_name(request), force=flag(request, "force"))
    return no_content()


async def unload(request: web.Request) -> web.Response:
    """Unload the topic (each partition): its clients reconnect and look it up again.

    In a cluster, ownership goes too, by the handoff path (marked as releasing first, so
    lookups wait for the next owner rather than send the clients straight back); the
    topic's next lookup places it again. A topic that is not loaded is left as it is.
    """
    ctx = context(request)
    name = topic_name(request)
    for part in await partitions(ctx, name):
        # Checked before releasing: the redirect that brought the call here may have made
        # this broker the owner of a topic that does not exist.
        if ctx.pulsar.registry.loaded(part) is None and not await stream_exists(ctx.storage, part):
            raise AdminError(404, "Topic not found")
        await unload_here(ctx, part)
    log.info("topic %s unloaded through the admin API", name)
    return no_content()


async def unload_here(ctx, part) -> None:
    """Unload one (partition) topic this broker owns or has loaded; release its ownership too."""
    release = getattr(ctx.placement, "release", None)
    loaded = ctx.pulsar.registry.loaded(part)
    if release is not None and ctx.placement.owns(str(part)):
        await release(str(part), "unloaded through the admin API")
    elif loaded is not None:
        await ctx.pulsar.registry.unload(loaded, "unloaded through the admin API")


async def trim(request: web.Request) -> web.Response:
    """Apply the topic's retention (else its namespace's) to the topic now (Pulsar's ``trimTopic``)."""
    ctx = context(request)
    name = topic_name(request)
    await require_namespace(ctx.meta, name.tenant, name.namespace)
    policy = await retention.effective(ctx, name)
    below_view = await retention.releases_below_view(ctx, name)
    for part in await partitions(ctx, name):
        topic = await require_topic(ctx, part)
        if policy is not None or below_view:
            await retention.apply(ctx, topic.name, policy, below_view=below_view)
    return no_content()


def add_routes(router: web.UrlDispatcher) -> None:
    ns = "/admin/v2/persistent/{tenant}/{namespace}"
    t = ns + "/{topic}"
    router.add_get(ns, list_topics)
    router.add_get(ns + "/partitioned", list_partitioned)
    router.add_put(t, create_topic)
    router.add_delete(t, delete)
    router.add_put(t + "/partitions", create_partitioned)
    router.add_post(t + "/partitions", update_partitioned)
    router.add_get(t + "/partitions", get_partitions)
    router.add_delete(t + "/partitions", delete_partitioned_topic)
    router.add_post(t + "/trim", trim)
    router.add_put(t + "/unload", unload)
    router.add_get("/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/partitions", get_non_persistent_partitions)
