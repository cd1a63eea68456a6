"""Topic stats (``.../stats``, ``.../partitioned-stats``) and internal stats (``.../internalStats``).

Counters and rates come from the topic's meters (``topics.rates``), kept since
the topic was loaded on this broker as a Pulsar broker keeps them: Pulsar and
Kafka traffic both count (a topic written by Kafka shows ``msgRateIn``; what Kafka
consumers fetch counts in the topic's ``msgRateOut`` and ``msgOutCounter``, under
no subscription). Rates cover the last ``rates.WINDOW_SECONDS``. Internal stats
describe the stream in Pulsar's managed ledger terms: one "ledger" (the stream
id), entry ids are offsets (as in message ids), so ``markDeletePosition`` is
``{stream}:{acked below - 1}``.
"""

from __future__ import annotations

import json
import time

from aiohttp import web

from ...ledger.ackset import AckSet
from ...ledger.cursor import cursor_key, list_cursors, stream_partition
from ...storage import view
from ...pulsar.server.consumers import REPLICATED_SUBSCRIPTION
from ...pulsar.server.dispatcher import THROTTLE_EVENTS
from ...pulsar.replication.manager import ATTACHMENT as REPLICATION
from ...topics.rates import RateMeter, combined_rates
from .common import AdminError, context, flag, partitions, require_topic, topic_name

_SUB_TYPES = {0: "Exclusive", 1: "Shared", 2: "Failover", 3: "Key_Shared"}
_ACCESS_MODES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}
_IDLE = RateMeter()  # what a subscription that delivered nothing since the load reads


def _out_stats(meter: RateMeter) -> dict:
    rate, throughput = meter.rates()
    return {"msgRateOut": rate, "msgThroughputOut": throughput, "bytesOutCounter": meter.bytes,
            "msgOutCounter": meter.messages}


async def _size_below(ctx, stream_id: int, offset: int, tail) -> int:
    """Cumulative stream bytes before the slice holding ``offset``."""
    return await view.size_before(ctx.meta, stream_id, offset, tail)


async def _cursors(ctx, topic) -> dict[str, tuple[AckSet, int | None, object]]:
    """name -> (acks, read position or None, dispatcher or None), loaded cursors first."""
    out = {name: (d.sub.cursor.acks, d.sub.cursor.read_position, d) for name, d in topic.dispatchers.items()}
    partition = stream_partition(topic.stream_id)
    for name in await list_cursors(ctx.meta, topic.stream_id):
        if name not in out:
            rec = await ctx.meta.get(cursor_key(topic.stream_id, name), partition_key=partition)
            if rec is not None:
                value = json.loads(rec.value)
                out[name] = (AckSet.from_json(value["acks"]), value.get("read"), None)
    return out


async def topic_stats(ctx, topic) -> dict:
    await topic.handle.refresh()
    end, start = topic.handle.next_offset(), topic.handle.start_offset()
    tail = await ctx.storage.tail(topic.stream_id)
    storage_size = max(0, tail.size - await _size_below(ctx, topic.stream_id, start, tail))
    per_record = storage_size / (end - start) if end > start else 0.0
    traffic = topic.core.traffic
    subs = {}
    backlog_total = 0
    for sub_name, (acks, _read, dispatcher) in sorted((await _cursors(ctx, topic)).items()):
        backlog = max(0, end - acks.acked_below - acks.acked_count_between(acks.acked_below, end))
        backlog_total = max(backlog_total, backlog)
        consumers = []
        sub = dispatcher.sub if dispatcher is not None else None
        for slot in (sub.consumers.values() if sub is not None else ()):
            consumer = slot.handle
            unacked = sum(p.count for p in sub.pending.values() if p.token == slot.token)
            consumers.append({
                "consumerName": slot.name, "availablePermits": max(0, slot.permits), "unackedMessages": unacked,
                "address": consumer.conn.peer, "priorityLevel": slot.priority, "blockedConsumerOnUnackedMsgs": False,
                **_out_stats(consumer.meter), "msgRateRedeliver": 0.0,
                "avgMessagesPerEntry": 0, "metadata": {},
            })
        active = sub.active() if sub is not None else None
        subs[sub_name] = {
            **_out_stats(traffic.outbound.get(sub_name, _IDLE)),
            "msgRateRedeliver": dispatcher.redelivered.rates()[0] if dispatcher is not None else 0.0,
            "msgBacklog": backlog, "backlogSize": int(backlog * per_record), "msgBacklogNoDelayed": backlog,
            "msgDelayed": len(getattr(dispatcher, "_delayed", ())), "blockedSubscriptionOnUnackedMsgs": False,
            "unackedMessages": sum(c["unackedMessages"] for c in consumers),
            "type": _SUB_TYPES.get(int(sub.type), "Exclusive") if sub is not None else "Exclusive",
            "activeConsumerName": active.name if active is not None else None,
            "msgRateExpired": 0.0, "totalMsgExpired": 0, "consumers": consumers,
            "isDurable": sub.cursor.durable if sub is not None else True,
            "isReplicated": bool(sub is not None and sub.cursor.properties.get(REPLICATED_SUBSCRIPTION)),
            "nonContiguousDeletedMessagesRanges": len(acks.ranges),
            "subscriptionProperties": {k: v for k, v in sub.cursor.properties.items() if k != REPLICATED_SUBSCRIPTION}
            if sub is not None else {},
            **(dispatcher.throttle_events if dispatcher is not None else dict.fromkeys(THROTTLE_EVENTS, 0)),
        }
    publishers = []
    for p in topic.producers.values():
        rate, throughput = p.meter.rates()
        publishers.append({
            "producerId": p.producer_id, "producerName": p.name, "address": p.conn.peer,
            "accessMode": _ACCESS_MODES.get(p.access_mode, "Shared"),
            "msgRateIn": rate, "msgThroughputIn": throughput, "averageMsgSize": p.meter.average_size,
            "metadata": {},
        })
    inbound = traffic.inbound
    rate_in, throughput_in = inbound.rates()
    meters = list(traffic.outbound.values())  # every subscription's and Kafka's reads
    rate_out, throughput_out = combined_rates(meters)
    return {
        "msgRateIn": rate_in, "msgThroughputIn": throughput_in, "msgRateOut": rate_out,
        "msgThroughputOut": throughput_out, "bytesInCounter": inbound.bytes, "msgInCounter": inbound.messages,
        "bytesOutCounter": sum(m.bytes for m in meters), "msgOutCounter": sum(m.messages for m in meters),
        "averageMsgSize": inbound.average_size, "msgChunkPublished": False,
        "storageSize": storage_size, "backlogSize": int(backlog_total * per_record), "offloadedStorageSize": 0,
        "publishers": publishers, "waitingPublishers": 0, "subscriptions": subs,
        "replication": _replication_stats(topic), "deduplicationStatus": "Enabled", "topicEpoch": topic.epoch,
        "publishRateLimitedTimes": topic.core.publish_rate_limited,
        "nonContiguousDeletedMessagesRanges": sum(s["nonContiguousDeletedMessagesRanges"] for s in subs.values()),
        **_wal_stats(ctx, topic),
    }


def _replication_stats(topic) -> dict:
    """Pulsar's ``replication``: each remote cluster's replicator on this (owning) broker."""
    state = topic.core.attachments.get(REPLICATION)
    return state.stats() if state is not None else {}


def _wal_stats(ctx, topic) -> dict:
    """Where the topic's acknowledged writes live before upload (Nereus' own fields; Pulsar's
    clients skip fields they do not know). The lag is its broker's WAL writer's, all topics of
    the profile together: one upload carries many topics' writes."""
    durability = topic.handle.durability
    uploader = ctx.storage.writer_for(durability).uploader
    return {"walProfile": durability.profile,
            "walUploadLagBytes": uploader.held_bytes if uploader is not None else 0,
            "walUploadLagSeconds": round(uploader.oldest_age(), 3) if uploader is not None else 0.0}


def _position(stream_id: int, offset: int) -> str:
    return f"{stream_id}:{offset}"


async def internal_stats(ctx, topic) -> dict:
    await topic.handle.refresh()
    sid = topic.stream_id
    end, start = topic.handle.next_offset(), topic.handle.start_offset()
    tail = await ctx.storage.tail(sid)
    size = max(0, tail.size - await _size_below(ctx, sid, start, tail))
    cursors = {}
    for name, (acks, read, dispatcher) in sorted((await _cursors(ctx, topic)).items()):
        ranges = ", ".join(f"({_position(sid, a - 1)}..{_position(sid, b - 1)}]" for a, b in acks.ranges)
        cursors[name] = {
            "markDeletePosition": _position(sid, acks.acked_below - 1),
            "readPosition": _position(sid, max(read if read is not None else acks.acked_below, acks.acked_below)),
            "waitingReadOp": False, "pendingReadOps": 0, "messagesConsumedCounter": acks.acked_below,
            "cursorLedger": -1, "cursorLedgerLastEntry": -1, "individuallyDeletedMessages": f"[{ranges}]",
            "lastLedgerSwitchTimestamp": "", "state": "Open",
            "numberOfEntriesSinceFirstNotAckedMessage": max(0, end - acks.acked_below),
            "totalNonContiguousDeletedMessagesRange": len(acks.ranges),
            "properties": {}, "active": bool(dispatcher is not None and dispatcher.sub.consumers),
        }
    return {
        "entriesAddedCounter": end, "numberOfEntries": end - start, "totalSize": size,
        "currentLedgerEntries": end - start, "currentLedgerSize": size, "lastLedgerCreatedTimestamp": "",
        "waitingCursorsCount": 0, "pendingAddEntriesCount": 0, "lastConfirmedEntry": _position(sid, end - 1),
        "state": "LedgerOpened",
        "ledgers": [{"ledgerId": sid, "entries": end - start, "size": size, "offloaded": False,
                     "underReplicated": False}],
        "cursors": cursors, "schemaLedgers": [],
        "compactedLedger": {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False, "underReplicated": False},
        "streamId": sid, "startOffset": start, "nextOffset": end,
    }


async def _single(request: web.Request):
    ctx = context(request)
    name = topic_name(request)
    parts = await partitions(ctx, name)
    if parts != [name]:
        raise AdminError(404, "Topic not found: it is partitioned, see .../partitioned-stats")
    return ctx, await require_topic(ctx, name)


async def get_stats(request: web.Request) -> web.Response:
    ctx, topic = await _single(request)
    return web.json_response(await topic_stats(ctx, topic))


async def get_internal_stats(request: web.Request) -> web.Response:
    ctx, topic = await _single(request)
    return web.json_response(await internal_stats(ctx, topic))


async def get_backlog(request: web.Request) -> web.Response:
    """Pulsar's ``PersistentOfflineTopicStats``: each cursor's backlog, the replicators' included."""
    ctx, topic = await _single(request)
    await topic.handle.refresh()
    end, start = topic.handle.next_offset(), topic.handle.start_offset()
    tail = await ctx.storage.tail(topic.stream_id)
    cursors = {name: {"cursorBacklog": max(0, end - acks.acked_below - acks.acked_count_between(acks.acked_below, end)),
                      "cursorLedgerId": -1}
               for name, (acks, _read, _d) in sorted((await _cursors(ctx, topic)).items())}
    return web.json_response({
        "storageSize": max(0, tail.size - await _size_below(ctx, topic.stream_id, start, tail)),
        "totalMessages": end - start,
        "messageBacklog": max((c["cursorBacklog"] for c in cursors.values()), default=0),
        "brokerName": getattr(ctx.placement.local, "name", ""), "topicName": str(topic.name),
        "dataLedgerDetails": [], "cursorDetails": cursors,
        "statGeneratedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter", "msgInCounter",
           "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize")


async def get_partitioned_stats(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request)
    parts = await partitions(ctx, name)
    if parts == [name]:
        raise AdminError(404, "Partitioned topic not found")
    per = {str(p): await topic_stats(ctx, await require_topic(ctx, p)) for p in parts}
    return web.json_response(aggregate(per, per_partition=flag(request, "perPartition", default=True)))


def aggregate(per: dict[str, dict], *, per_partition: bool) -> dict:
    """Pulsar's PartitionedTopicStats from each partition's stats (``{partition name: stats}``)."""
    total = {k: sum(s[k] for s in per.values()) for k in _SUMMED}
    total["metadata"] = {"partitions": len(per)}
    if per:  # the partitions of a topic share its namespace's profile; the lag, each owner's largest
        first = next(iter(per.values()))
        total["walProfile"] = first.get("walProfile", "object")
        total["walUploadLagBytes"] = max(s.get("walUploadLagBytes", 0) for s in per.values())
        total["walUploadLagSeconds"] = max(s.get("walUploadLagSeconds", 0.0) for s in per.values())
    total["publishers"] = [pub for s in per.values() for pub in s["publishers"]]
    subs: dict[str, dict] = {}
    for s in per.values():
        for sub_name, sub in s["subscriptions"].items():
            agg = subs.setdefault(sub_name, {"msgBacklog": 0, "msgRateOut": 0.0, "msgThroughputOut": 0.0,
                                             "msgOutCounter": 0, "bytesOutCounter": 0, "unackedMessages": 0,
                                             "type": sub["type"], "consumers": []})
            for k in ("msgBacklog", "msgRateOut", "msgThroughputOut", "msgOutCounter", "bytesOutCounter",
                      "unackedMessages"):
                agg[k] += sub[k]
            agg["consumers"] += sub["consumers"]
    total["subscriptions"] = subs
    replication: dict[str, dict] = {}
    for s in per.values():
        for remote, rep in s.get("replication", {}).items():
            agg = replication.setdefault(remote, {"msgRateOut": 0.0, "msgThroughputOut": 0.0, "replicationBacklog": 0,
                                                  "connected": True, "replicationDelayInSeconds": 0})
            for k in ("msgRateOut", "msgThroughputOut", "replicationBacklog"):
                agg[k] += rep[k]
            agg["connected"] = agg["connected"] and rep["connected"]
            agg["replicationDelayInSeconds"] = max(agg["replicationDelayInSeconds"], rep["replicationDelayInSeconds"])
    total["replication"] = replication
    if per_partition:
        total["partitions"] = per
    return total


def add_routes(router: web.UrlDispatcher) -> None:
    t = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    router.add_get(t + "/stats", get_stats)
    router.add_get(t + "/internalStats", get_internal_stats)
    router.add_get(t + "/partitioned-stats", get_partitioned_stats)
    router.add_get(t + "/backlog", get_backlog)
