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
CHECK_BATCH = 1000  # loaded topics whose policies the threshold check reads together
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
    """Start compacting each loaded topic whose backlog above its horizon passed its threshold.

    Thousands of topics at a time have their policies and configs read together: a broker with
    many loaded topics passes over all of them every interval.
    """
    registry = ctx.pulsar.registry
    loaded = [(key, topic) for key, topic in list(registry.topics.items())
              if not topic.closed and not registry.key_compactor.running(key)]
    started = []
    for first in range(0, len(loaded), CHECK_BATCH):
        batch = loaded[first:first + CHECK_BATCH]
        names = [topic.name for _, topic in batch]
        for (key, topic), threshold, kafka in zip(batch, await _thresholds(ctx, names),
                                                  await _kafka_compactions(ctx, names)):
            if (threshold > 0 or kafka is not None) and await _start_if_due(ctx, key, topic, threshold, kafka):
                started.append(key)
    return started


async def _start_if_due(ctx: AdminContext, key: str, topic, threshold: int, kafka) -> bool:
    registry = ctx.pulsar.registry
    if topic.closed or registry.key_compactor.running(key):
        return False
    view, tail = await asyncio.gather(key_view.state(ctx.meta, topic.stream_id), ctx.storage.tail(topic.stream_id))
    dirty = tail.size - view.stream_size
    if tail.next <= view.horizon or dirty <= 0:
        return False
    if kafka is not None and dirty >= kafka[0] * tail.size:
        registry.key_compactor.trigger(key, delete_retention_ms=kafka[1], min_lag_ms=kafka[2])
    elif threshold > 0 and dirty > threshold:
        registry.key_compactor.trigger(key, delete_retention_ms=PULSAR_DELETE_RETENTION_MS)
    else:
        return False
    log.info("%s: compaction started (%d bytes above the horizon)", key, dirty)
    return True


async def _thresholds(ctx: AdminContext, names: list[TopicName]) -> list[int]:
    """``threshold_of`` each topic: their policies and their namespaces' read together."""
    namespaces = list(dict.fromkeys((name.tenant, name.namespace) for name in names))
    records = await ctx.meta.get_many([topic_policies_key(n.tenant, n.namespace, n.base.local) for n in names]
                                      + [policies_key(tenant, namespace) for tenant, namespace in namespaces])
    of_namespace = {ns: (json.loads(rec.value).get(NAMESPACE_FIELD) or 0) if rec is not None else 0
                    for ns, rec in zip(namespaces, records[len(names):])}
    out = []
    for name, rec in zip(names, records[:len(names)]):
        own = json.loads(rec.value).get(TOPIC_FIELD) if rec is not None else None
        out.append(own if own is not None else of_namespace[(name.tenant, name.namespace)])
    return out


async def _kafka_compactions(ctx: AdminContext, names: list[TopicName]) -> list[tuple[float, int, int] | None]:
    """``_kafka_compaction`` of each topic, their configs read together."""
    out: list[tuple[float, int, int] | None] = [None] * len(names)
    kafka = getattr(ctx.node, "kafka", None)
    if kafka is None:
        return out
    kafka_topics = [i for i, name in enumerate(names) if (name.tenant, name.namespace) == ("public", "default")]
    for i, configs in zip(kafka_topics, await kafka.configs.topics([names[i].base.local for i in kafka_topics])):
        out[i] = _compact_settings(configs)
    return out


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
    try:
        configs = await kafka.configs.topic(name.base.local)
    except Exception:  # not a Kafka topic's name
        return None
    return _compact_settings(configs)


def _compact_settings(configs) -> tuple[float, int, int] | None:
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
