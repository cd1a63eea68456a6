"""Topic stats (``.../stats``, ``.../partitioned-stats``) and internal stats (``.../internalStats``).

Counters come from the broker's Prometheus counters (process lifetime, like a
Pulsar broker's after a topic load); rates are their change over the last samples
taken by ``sample_loop``. Internal stats describe the stream in Pulsar's managed
ledger terms: one "ledger" (the stream id), entry ids are offsets (as in message
ids), so ``markDeletePosition`` is ``{stream}:{acked below - 1}``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque

from aiohttp import web

from ...ledger.ackset import AckSet
from ...ledger.cursor import cursor_key, list_cursors, stream_partition
from ...pulsar.server import metrics
from ...storage import view
from .common import AdminError, context, flag, partitions, require_topic, topic_name

SAMPLE_EVERY = 5.0
_WINDOW = 4  # samples kept: rates cover the last 15-20 s
_SUB_TYPES = {0: "Exclusive", 1: "Shared", 2: "Failover", 3: "Key_Shared"}
_samples: deque = deque(maxlen=_WINDOW)


def _counters() -> dict[tuple, float]:
    values: dict[tuple, float] = {}
    for counter in (metrics.IN_MESSAGES, metrics.IN_BYTES, metrics.OUT_MESSAGES, metrics.OUT_BYTES,
                    metrics.REDELIVERED):
        for family in counter.collect():
            for s in family.samples:
                if s.name.endswith("_total"):
                    values[(family.name,) + tuple(s.labels.values())] = s.value  # labels: topic[, subscription]
    return values


async def sample_loop() -> None:
    """Keep the last counter samples for rates (a task of the HTTP app)."""
    while True:
        _samples.append((time.monotonic(), _counters()))
        await asyncio.sleep(SAMPLE_EVERY)


class _Rates:
    def __init__(self) -> None:
        self.now = _counters()
        self.then, self.elapsed = ({}, 0.0) if not _samples else (_samples[0][1], time.monotonic() - _samples[0][0])

    def total(self, *key) -> float:
        return self.now.get(key, 0.0)

    def rate(self, *key) -> float:
        if self.elapsed < 0.5:
            return 0.0
        return max(0.0, self.now.get(key, 0.0) - self.then.get(key, 0.0)) / self.elapsed


async def _size_below(ctx, stream_id: int, offset: int, tail) -> int:
    """Cumulative stream bytes before the slice holding ``offset``."""
    if offset <= 0:
        return 0
    try:
        slices = await view.entries_around(ctx.meta, stream_id, offset)
    except (ValueError, KeyError):
        return 0
    for entry in slices:
        if entry.base <= offset < entry.base + entry.records:
            return entry.size_before
    return tail.size if offset >= tail.next else 0


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
    name = str(topic.name)
    end, start = topic.handle.next_offset(), topic.handle.start_offset()
    tail = await ctx.storage.tail(topic.stream_id)
    storage_size = max(0, tail.size - await _size_below(ctx, topic.stream_id, start, tail))
    per_record = storage_size / (end - start) if end > start else 0.0
    r = _Rates()
    in_msgs, in_bytes = r.total("pulsar_in_messages", name), r.total("pulsar_in_bytes", name)
    subs = {}
    backlog_total = 0
    for sub_name, (acks, _read, dispatcher) in sorted((await _cursors(ctx, topic)).items()):
        backlog = max(0, end - acks.acked_below - acks.acked_count_between(acks.acked_below, end))
        backlog_total = max(backlog_total, backlog)
        key = ("pulsar_out_messages", name, sub_name)
        consumers = []
        sub = dispatcher.sub if dispatcher is not None else None
        for slot in (sub.consumers.values() if sub is not None else ()):
            consumer = slot.handle
            unacked = sum(p.count for p in sub.pending.values() if p.token == slot.token)
            consumers.append({
                "consumerName": slot.name, "availablePermits": max(0, slot.permits), "unackedMessages": unacked,
                "address": consumer.conn.peer, "priorityLevel": slot.priority, "blockedConsumerOnUnackedMsgs": False,
                "msgRateOut": 0.0, "msgThroughputOut": 0.0, "bytesOutCounter": 0, "msgOutCounter": 0,
                "msgRateRedeliver": 0.0, "metadata": {},
            })
        active = sub.active() if sub is not None else None
        subs[sub_name] = {
            "msgRateOut": r.rate(*key), "msgThroughputOut": r.rate("pulsar_out_bytes", name, sub_name),
            "bytesOutCounter": int(r.total("pulsar_out_bytes", name, sub_name)), "msgOutCounter": int(r.total(*key)),
            "msgRateRedeliver": r.rate("pulsar_redelivered_messages", name, sub_name),
            "msgBacklog": backlog, "backlogSize": int(backlog * per_record), "msgBacklogNoDelayed": backlog,
            "msgDelayed": len(getattr(dispatcher, "_delayed", ())), "blockedSubscriptionOnUnackedMsgs": False,
            "unackedMessages": sum(c["unackedMessages"] for c in consumers),
            "type": _SUB_TYPES.get(int(sub.type), "Exclusive") if sub is not None else "Exclusive",
            "activeConsumerName": active.name if active is not None else None,
            "msgRateExpired": 0.0, "totalMsgExpired": 0, "consumers": consumers,
            "isDurable": sub.cursor.durable if sub is not None else True, "isReplicated": False,
            "nonContiguousDeletedMessagesRanges": len(acks.ranges),
            "subscriptionProperties": dict(sub.cursor.properties) if sub is not None else {},
        }
    publishers = [{
        "producerId": p.producer_id, "producerName": p.name, "address": p.conn.peer,
        "accessMode": {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}.get(
            p.access_mode, "Shared"),
        "msgRateIn": 0.0, "msgThroughputIn": 0.0, "averageMsgSize": 0.0, "metadata": {},
    } for p in topic.producers.values()]
    msg_out = sum(s["msgOutCounter"] for s in subs.values())
    return {
        "msgRateIn": r.rate("pulsar_in_messages", name), "msgThroughputIn": r.rate("pulsar_in_bytes", name),
        "msgRateOut": sum(s["msgRateOut"] for s in subs.values()),
        "msgThroughputOut": sum(s["msgThroughputOut"] for s in subs.values()),
        "bytesInCounter": int(in_bytes), "msgInCounter": int(in_msgs),
        "bytesOutCounter": sum(s["bytesOutCounter"] for s in subs.values()), "msgOutCounter": msg_out,
        "averageMsgSize": in_bytes / in_msgs if in_msgs else 0.0, "msgChunkPublished": False,
        "storageSize": storage_size, "backlogSize": int(backlog_total * per_record), "offloadedStorageSize": 0,
        "publishers": publishers, "waitingPublishers": 0, "subscriptions": subs, "replication": {},
        "deduplicationStatus": "Enabled", "topicEpoch": topic.epoch,
        "nonContiguousDeletedMessagesRanges": sum(s["nonContiguousDeletedMessagesRanges"] for s in subs.values()),
    }


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
    total["publishers"] = [pub for s in per.values() for pub in s["publishers"]]
    subs: dict[str, dict] = {}
    for s in per.values():
        for sub_name, sub in s["subscriptions"].items():
            agg = subs.setdefault(sub_name, {"msgBacklog": 0, "msgRateOut": 0.0, "msgOutCounter": 0,
                                             "unackedMessages": 0, "type": sub["type"], "consumers": []})
            for k in ("msgBacklog", "msgRateOut", "msgOutCounter", "unackedMessages"):
                agg[k] += sub[k]
            agg["consumers"] += sub["consumers"]
    total["subscriptions"] = subs
    if per_partition:
        total["partitions"] = per
    return total


def add_routes(router: web.UrlDispatcher) -> None:
    t = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    router.add_get(t + "/stats", get_stats)
    router.add_get(t + "/internalStats", get_internal_stats)
    router.add_get(t + "/partitioned-stats", get_partitioned_stats)
