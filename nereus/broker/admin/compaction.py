"""Topic compaction (key-based): trigger, status and the compaction-threshold policies.

- ``PUT /admin/v2/persistent/{t}/{ns}/{topic}/compaction``: start compacting (204;
  409 while one runs; a partitioned topic: each partition, see ``routing.PER_PARTITION``).
- ``GET .../compaction``: Pulsar's ``LongRunningProcessStatus``
  ``{"status": NOT_RUN|RUNNING|SUCCESS|ERROR, "lastError": ...}`` of the owner's last
  run (a partitioned topic: the least advanced of its partitions, asked of each
  partition's owner).
- ``compactionThreshold`` of a namespace (``/admin/v2/namespaces/{t}/{ns}/compactionThreshold``,
  Pulsar's ``compaction_threshold``) and of a topic (``.../{topic}/compactionThreshold``,
  a topic policy): bytes of backlog above the view's horizon that start a compaction
  automatically; 0 or unset: never. Each broker checks the topics it has loaded every
  ``monitor_interval`` seconds (Pulsar's ``brokerServiceCompactionMonitorIntervalInSeconds``).
- Kafka topics with ``cleanup.policy`` including ``compact`` are compacted by the same
  check once the bytes above the horizon are ``min.cleanable.dirty.ratio`` of the
  partition, their tombstones kept for the topic's ``delete.retention.ms`` (also when
  compacted through the admin API). Other topics' tombstones are dropped with their
  keys at once, as Pulsar's compactor does. ``min.compaction.lag.ms`` keeps the
  horizon below the records committed less than that long ago.
"""

from __future__ import annotations

import asyncio
import json
import logging

from aiohttp import web

from ...ledger.naming import TopicName
from ...storage import key_view
from ...topics.key_compaction import ERROR, NOT_RUN, RUNNING, SUCCESS, CompactionRunning
from ...ledger.policies import policies_key, topic_policies_key
from . import topic_policies
from .common import (AdminContext, AdminError, body, context, no_content, partitions, require_namespace,
                     stream_exists, topic_name, update_record)

log = logging.getLogger(__name__)

#: Pulsar's default brokerServiceCompactionMonitorIntervalInSeconds.
MONITOR_INTERVAL = 60.0
NAMESPACE_FIELD = "compaction_threshold"
TOPIC_FIELD = "compactionThreshold"
#: Pulsar's compactor removes a key whose latest message has an empty payload at once.
PULSAR_DELETE_RETENTION_MS = 0
_ORDER = {RUNNING: 0, ERROR: 1, NOT_RUN: 2, SUCCESS: 3}


async def _targets(ctx: AdminContext, request: web.Request) -> list[TopicName]:
    name = topic_name(request)
    await require_namespace(ctx.meta, name.tenant, name.namespace)
    parts = await partitions(ctx, name)
    existing = [p for p in parts if await stream_exists(ctx.storage, p)]
    if not existing and parts == [name]:
        raise AdminError(404, "Topic not found")
    return existing


async def trigger(request: web.Request) -> web.Response:
    ctx = context(request)
    compactor = ctx.pulsar.registry.key_compactor
    targets = await _targets(ctx, request)
    if any(compactor.running(str(t)) for t in targets):
        raise AdminError(409, "Compaction already in progress")
    options = [await compaction_options(ctx, t) for t in targets]
    for target, how in zip(targets, options):
        try:
            compactor.trigger(str(target), **how)
        except CompactionRunning as exc:
            raise AdminError(409, str(exc)) from None
    log.info("compaction of %s triggered through the admin API", topic_name(request))
    return no_content()


async def status(request: web.Request) -> web.Response:
    ctx = context(request)
    compactor = ctx.pulsar.registry.key_compactor
    return web.json_response(aggregate([compactor.status(str(t)).to_json() for t in await _targets(ctx, request)]))


def aggregate(statuses: list[dict]) -> dict:
    """The status of a partitioned topic: its least advanced partition's (NOT_RUN with none)."""
    if not statuses:
        return {"status": NOT_RUN, "lastError": ""}
    return min(statuses, key=lambda s: _ORDER.get(s.get("status"), 0))


def validate_threshold(value) -> int:
    """A compaction threshold (bytes, >= 0); AdminError when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AdminError(412, "compactionThreshold must be a number of bytes >= 0")
    return value


async def get_namespace_threshold(request: web.Request) -> web.Response:
    ctx = context(request)
    m = request.match_info
    policies = await require_namespace(ctx.meta, m["tenant"], m["namespace"])
    value = policies.get(NAMESPACE_FIELD)
    return no_content() if value is None else web.json_response(value)


async def set_namespace_threshold(request: web.Request, value: int | None = None) -> web.Response:
    ctx = context(request)
    m = request.match_info
    if request.method != "DELETE":
        value = validate_threshold(await body(request))
    await require_namespace(ctx.meta, m["tenant"], m["namespace"])

    def change(stored: dict) -> dict:
        if value is None:
            stored.pop(NAMESPACE_FIELD, None)
        else:
            stored[NAMESPACE_FIELD] = value
        return stored

    await update_record(ctx.meta, policies_key(m["tenant"], m["namespace"]), change, what="Namespace")
    return no_content()


async def _topic_policies(ctx: AdminContext, name: TopicName) -> dict:
    rec = await ctx.meta.get(topic_policies_key(name.tenant, name.namespace, name.base.local))
    return json.loads(rec.value) if rec is not None else {}


async def get_topic_threshold(request: web.Request) -> web.Response:
    ctx = context(request)
    name = await topic_policies.require_policy_topic(ctx, request)
    value = (await _topic_policies(ctx, name)).get(TOPIC_FIELD)
    if value is None and request.query.get("applied", "false").lower() == "true":
        value = ((await require_namespace(ctx.meta, name.tenant, name.namespace)).get(NAMESPACE_FIELD) or 0)
    return no_content() if value is None else web.json_response(value)


async def set_topic_threshold(request: web.Request) -> web.Response:
    ctx = context(request)
    value = None if request.method == "DELETE" else validate_threshold(await body(request))
    name = await topic_policies.require_policy_topic(ctx, request)
    await topic_policies.set_policy(ctx, name, TOPIC_FIELD, value)
    return no_content()


async def threshold_of(ctx: AdminContext, name: TopicName) -> int:
    """The threshold in force for ``name``: the topic's policy, else its namespace's, else 0."""
    own = (await _topic_policies(ctx, name)).get(TOPIC_FIELD)
    if own is not None:
        return own
    rec = await ctx.meta.get(policies_key(name.tenant, name.namespace))
    return (json.loads(rec.value).get(NAMESPACE_FIELD) or 0) if rec is not None else 0


async def check_thresholds(ctx: AdminContext) -> list[str]:
    """Start compacting each loaded topic whose backlog above its horizon passed its threshold."""
    registry = ctx.pulsar.registry
    started = []
    for key, topic in list(registry.topics.items()):
        if topic.closed or registry.key_compactor.running(key):
            continue
        kafka = await _kafka_compaction(ctx, topic.name)
        threshold = await threshold_of(ctx, topic.name)
        if threshold <= 0 and kafka is None:
            continue
        view, tail = await asyncio.gather(key_view.state(ctx.meta, topic.stream_id),
                                          ctx.storage.tail(topic.stream_id))
        dirty = tail.size - view.stream_size
        if tail.next <= view.horizon or dirty <= 0:
            continue
        if kafka is not None and dirty >= kafka[0] * tail.size:
            registry.key_compactor.trigger(key, delete_retention_ms=kafka[1], min_lag_ms=kafka[2])
        elif threshold > 0 and dirty > threshold:
            registry.key_compactor.trigger(key, delete_retention_ms=PULSAR_DELETE_RETENTION_MS)
        else:
            continue
        started.append(key)
        log.info("%s: compaction started (%d bytes above the horizon)", key, dirty)
    return started


async def compaction_options(ctx: AdminContext, name: TopicName) -> dict:
    """How a build of ``name`` runs: a Kafka compact topic keeps tombstones for its
    ``delete.retention.ms`` and leaves records younger than ``min.compaction.lag.ms``;
    other topics drop tombstones at once (Pulsar's compactor drops a key on an empty payload)."""
    kafka = await _kafka_compaction(ctx, name)
    if kafka is None:
        return {"delete_retention_ms": PULSAR_DELETE_RETENTION_MS}
    return {"delete_retention_ms": kafka[1], "min_lag_ms": kafka[2]}


async def _kafka_compaction(ctx: AdminContext, name: TopicName) -> tuple[float, int, int] | None:
    """(min.cleanable.dirty.ratio, delete.retention.ms, min.compaction.lag.ms) of a Kafka topic
    with ``cleanup.policy`` compact."""
    kafka = getattr(ctx.node, "kafka", None)
    if kafka is None or (name.tenant, name.namespace) != ("public", "default"):
        return None
    topic = name.base.local
    try:
        configs = await kafka.configs.topic(topic)
    except Exception:  # not a Kafka topic's name
        return None
    if "compact" not in configs["cleanup.policy"].value.split(","):
        return None
    return (float(configs["min.cleanable.dirty.ratio"].value), int(configs["delete.retention.ms"].value),
            int(configs["min.compaction.lag.ms"].value))


async def monitor(ctx: AdminContext, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await check_thresholds(ctx)
        except Exception:
            log.exception("the compaction threshold check failed")


def add_routes(router: web.UrlDispatcher) -> None:
    t = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    router.add_put(t + "/compaction", trigger)
    router.add_get(t + "/compaction", status)
    router.add_get(t + "/compactionThreshold", get_topic_threshold)
    router.add_post(t + "/compactionThreshold", set_topic_threshold)
    router.add_put(t + "/compactionThreshold", set_topic_threshold)
    router.add_delete(t + "/compactionThreshold", set_topic_threshold)
    ns = "/admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold"
    router.add_get(ns, get_namespace_threshold)
    router.add_put(ns, set_namespace_threshold)
    router.add_post(ns, set_namespace_threshold)
    router.add_delete(ns, set_namespace_threshold)


__all__ = ["MONITOR_INTERVAL", "add_routes", "aggregate", "check_thresholds", "monitor", "threshold_of"]
