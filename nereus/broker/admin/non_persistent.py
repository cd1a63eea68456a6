"""``/admin/v2/non-persistent/{tenant}/{namespace}``: the non-persistent topics this broker serves, and their stats.

A non-persistent topic exists while clients use it, in the memory of its owner only;
its stats are Pulsar's NonPersistentTopicStats subset (no storage, no backlog, the
messages each subscription dropped for want of permits in ``msgDropRate``).
"""

from __future__ import annotations

from aiohttp import web

from ...ledger.naming import InvalidTopicName, TopicName
from .common import AdminError, context, require_namespace

_SUB_TYPES = {0: "Exclusive", 1: "Shared", 2: "Failover", 3: "Key_Shared"}


def memory_topics(ctx, tenant: str, namespace: str) -> list[TopicName]:
    """The namespace's non-persistent topics served here now."""
    prefix = f"non-persistent://{tenant}/{namespace}/"
    return sorted((TopicName.parse(n) for n in ctx.pulsar.registry.memory_topics if n.startswith(prefix)), key=str)


def _stats(topic) -> dict:
    traffic = topic.traffic
    rate_in, throughput_in = traffic.inbound.rates()
    subs = {}
    for name, dispatcher in sorted(topic.dispatchers.items()):
        sub = dispatcher.sub
        meter = traffic.outbound.get(name)
        rate, throughput = meter.rates() if meter is not None else (0.0, 0.0)
        subs[name] = {
            "msgRateOut": rate, "msgThroughputOut": throughput,
            "msgOutCounter": meter.messages if meter is not None else 0,
            "bytesOutCounter": meter.bytes if meter is not None else 0,
            "msgDropRate": dispatcher.dropped.rates()[0], "msgBacklog": 0, "type": _SUB_TYPES.get(int(sub.type)),
            "consumers": [{"consumerName": s.name, "availablePermits": max(0, s.permits),
                           "address": s.handle.conn.peer} for s in sub.consumers.values()],
            "isDurable": False,
        }
    return {
        "msgRateIn": rate_in, "msgThroughputIn": throughput_in, "msgInCounter": traffic.inbound.messages,
        "bytesInCounter": traffic.inbound.bytes, "averageMsgSize": traffic.inbound.average_size,
        "storageSize": 0, "backlogSize": 0, "topicEpoch": topic.epoch,
        "publishers": [{"producerName": p.name, "producerId": p.producer_id, "address": p.conn.peer}
                       for p in topic.producers.values()],
        "subscriptions": subs, "replication": {}, "msgDropRate": sum(d.dropped.rates()[0]
                                                                     for d in topic.dispatchers.values()),
    }


async def get_stats(request: web.Request) -> web.Response:
    ctx = context(request)
    m = request.match_info
    try:
        name = TopicName.parse(f"non-persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
    except InvalidTopicName as exc:
        raise AdminError(412, str(exc)) from None
    topic = ctx.pulsar.registry.memory_topics.get(str(name))
    if topic is None:
        raise AdminError(404, "Topic not found")
    return web.json_response(_stats(topic))


async def list_topics(request: web.Request) -> web.Response:
    ctx = context(request)
    tenant, namespace = request.match_info["tenant"], request.match_info["namespace"]
    await require_namespace(ctx.meta, tenant, namespace)
    return web.json_response([str(n) for n in memory_topics(ctx, tenant, namespace)])


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/non-persistent/{tenant}/{namespace}", list_topics)
    router.add_get("/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/stats", get_stats)
