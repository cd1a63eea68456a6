"""Retention policies applied to topics through ``nereus.storage.retention.enforce``.

A topic's own policy (``.../{topic}/retention``; on a partitioned topic, for each
partition) overrides its namespace's, as Pulsar's topic policies do. A Kafka topic
(in ``public/default``) with ``retention.ms`` or ``retention.bytes`` set on it has
that as its own policy (per partition, as in Kafka) unless a Pulsar topic policy is
set too. On a Kafka compact-only topic (``cleanup.policy=compact``) the raw records
below the key view's horizon are released as well (the view serves them);
``retention.ms`` / ``retention.bytes`` trim only with ``delete`` in the policy, as in
Kafka. With ``compact,delete`` the start offset retention leaves is where the view is
served from too (a key whose record is past retention is gone), so the raw records are
not released below it.

Pulsar's retention keeps *acknowledged* messages for a time or size; messages some
durable subscription has not acknowledged are never removed by it. So the trim is
capped at the slowest durable cursor: ``enforce`` runs on a view of the storage
whose ``trim`` stops at the first entry that cursor still needs. A topic without
subscriptions counts as fully acknowledged, as in Pulsar.

A namespace without a policy has the broker's (``defaultRetentionTimeInMinutes`` and
``defaultRetentionSizeInMB``; unlike Pulsar's 0 and 0, unlimited unless set: the
compacted data serves the lakehouse). Runs every ``INTERVAL`` seconds over the
namespaces, at once for a namespace or topic whose policy was just set, and on
``POST .../trim``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import unquote

from ...ledger.ackset import AckSet
from ...ledger.cursor import cursor_key, list_cursors, stream_partition
from ...ledger.naming import TopicName
from ...ledger.policies import POLICIES_ROOT, topic_policies_key, topic_policies_prefix
from ...topics.topic_configs import all_topic_configs, read_topic_configs
from ...storage import OffsetOutOfRange, StorageError, StreamNotFound, key_view
from ...storage.retention import RetentionPolicy, enforce
from .common import TENANTS_ROOT, AdminError, AdminContext, children_range, list_children, namespace_policies

log = logging.getLogger(__name__)

INTERVAL = 60.0
_MB = 1024 * 1024


def broker_default(ctx: AdminContext) -> dict:
    """The ``RetentionPolicies`` of namespaces without one: the broker's ``defaultRetention*`` settings."""
    options = ctx.node.options if ctx.node is not None else None
    return {"retentionTimeInMinutes": options.default_retention_minutes if options else -1,
            "retentionSizeInMB": options.default_retention_mb if options else -1}


def policy_of(policies: dict, default: dict | None = None) -> RetentionPolicy | None:
    """The storage policy of Pulsar's ``RetentionPolicies`` (-1: unlimited), else of ``default``;
    None: nothing to trim."""
    value = policies.get("retention_policies") or default
    if not value:
        return None
    minutes, size_mb = value.get("retentionTimeInMinutes", 0), value.get("retentionSizeInMB", 0)
    if minutes < 0 and size_mb < 0:
        return None
    return RetentionPolicy(max_bytes=None if size_mb < 0 else size_mb * _MB,
                           max_age_seconds=None if minutes < 0 else minutes * 60.0)


KAFKA_TENANT, KAFKA_NAMESPACE = "public", "default"  # where Kafka topics live


def kafka_compacted(configs: dict[str, str]) -> bool:
    """A Kafka topic with ``cleanup.policy`` compact (or compact,delete) set on it."""
    return "compact" in configs.get("cleanup.policy", "delete").split(",")


def kafka_compact_only(configs: dict[str, str]) -> bool:
    """``cleanup.policy=compact`` without ``delete``: the view outlives the raw records it replaces."""
    return kafka_compacted(configs) and "delete" not in configs.get("cleanup.policy", "delete").split(",")


def kafka_policy(configs: dict[str, str]) -> RetentionPolicy | None:
    """The storage policy of a Kafka topic's ``retention.ms`` / ``retention.bytes`` (-1: unlimited);
    None on a compact-only topic (Kafka's retention deletes nothing there)."""
    if "delete" not in configs.get("cleanup.policy", "delete").split(","):
        return None
    ms, size = int(configs.get("retention.ms", -1)), int(configs.get("retention.bytes", -1))
    if ms < 0 and size < 0:
        return None
    return RetentionPolicy(max_bytes=None if size < 0 else size, max_age_seconds=None if ms < 0 else ms / 1000)


def _is_kafka_namespace(tenant: str, namespace: str) -> bool:
    return (tenant, namespace) == (KAFKA_TENANT, KAFKA_NAMESPACE)


def validate(value) -> dict:
    """Pulsar's ``RetentionPolicies`` JSON checked (-1: unlimited); AdminError when it is not valid."""
    if not isinstance(value, dict):
        raise AdminError(400, "The retention policies must be a JSON object")
    try:
        minutes = int(value.get("retentionTimeInMinutes", 0))
        size_mb = int(value.get("retentionSizeInMB", 0))
    except (TypeError, ValueError):
        raise AdminError(400, "retentionTimeInMinutes and retentionSizeInMB must be integers") from None
    if minutes < -1 or size_mb < -1:
        raise AdminError(412, "Invalid retention policy: values must be >= -1 (-1 is unlimited)")
    return {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}



class _Capped:
    """The storage as ``enforce`` sees it, with trims stopped below ``floor``."""

    def __init__(self, storage, handle, floor: int) -> None:
        self._storage = storage
        self._handle = handle
        self._floor = floor
        self.meta = storage.meta

    async def tail(self, stream_id: int):
        return await self._storage.tail(stream_id)

    async def start(self, stream_id: int) -> int:
        return await self._storage.start(stream_id)

    async def trim(self, stream_id: int, target: int) -> int:
        if target > self._floor:
            # Stop at the start of the entry holding the floor: never inside an entry.
            try:
                result = await self._handle.fetch(self._floor, self._floor + 1, max_bytes=1)
            except (OffsetOutOfRange, StorageError):
                return await self._storage.start(stream_id)
            target = min([e.base_offset for e in result.entries] or [self._floor])
        start = await self._storage.start(stream_id)
        return await self._storage.trim(stream_id, target) if target > start else start


async def _floor(ctx: AdminContext, topic, stream_id: int) -> int | None:
    """Lowest acknowledged-below position over the durable subscriptions; None without any."""
    positions: dict[str, int] = {}
    partition = stream_partition(stream_id)
    for name in await list_cursors(ctx.meta, stream_id):
        rec = await ctx.meta.get(cursor_key(stream_id, name), partition_key=partition)
        if rec is not None:
            positions[name] = AckSet.from_json(json.loads(rec.value)["acks"]).acked_below
    if topic is not None:  # the loaded cursors are newer than their last persisted state
        for name, dispatcher in topic.dispatchers.items():
            if dispatcher.sub.cursor.durable:
                positions[name] = dispatcher.sub.cursor.acks.acked_below
    return min(positions.values()) if positions else None


async def apply(ctx: AdminContext, name: TopicName, policy: RetentionPolicy | None, *,
                below_view: bool = False) -> int | None:
    """Trim one topic under ``policy``; returns its start offset (None if it does not exist).

    ``below_view`` (a Kafka compact topic): also release the raw records below the key
    view's horizon, which the view serves to Kafka consumers from then on.
    """
    topic = ctx.pulsar.topics.get(str(name))
    try:
        handle = topic.handle if topic is not None else await ctx.storage.open_stream(str(name))
    except StreamNotFound:
        return None
    floor = await _floor(ctx, topic, handle.stream_id)
    view = ctx.storage if floor is None else _Capped(ctx.storage, handle, floor)
    before = handle.start_offset()
    start = await enforce(view, handle.stream_id, policy) if policy is not None else before
    if below_view:
        horizon = (await key_view.state(ctx.meta, handle.stream_id)).horizon
        if horizon > start:
            start = await view.trim(handle.stream_id, horizon)
    if topic is not None:
        await topic.handle.refresh()
    if start > before:
        log.info("retention: %s trimmed to offset %d", name, start)
    return start


async def topic_retention(meta, name: TopicName) -> dict | None:
    """The topic's own ``RetentionPolicies`` (its partitioned topic's, for a partition); None: unset."""
    base = name.base
    rec = await meta.get(topic_policies_key(base.tenant, base.namespace, base.local))
    return json.loads(rec.value).get("retention_policies") if rec is not None else None


async def _topic_retentions(ctx: AdminContext, tenant: str, namespace: str) -> dict[str, dict]:
    """Local topic name -> its own retention, over the namespace's topic policy records."""
    lo, hi = children_range(topic_policies_prefix(tenant, namespace))
    found = {}
    async for rec in ctx.meta.range_scan(lo, hi):
        value = json.loads(rec.value).get("retention_policies")
        if value:
            found[unquote(rec.key[len(lo):])] = value
    return found


async def effective(ctx: AdminContext, name: TopicName) -> RetentionPolicy | None:
    """The policy that applies to ``name``: its own, else its namespace's."""
    own = await topic_retention(ctx.meta, name)
    if own is not None:
        return policy_of({"retention_policies": own})
    if _is_kafka_namespace(name.tenant, name.namespace):
        configs = await read_topic_configs(ctx.meta, name.base.local)
        kafka = kafka_policy(configs)
        if kafka is not None or kafka_compacted(configs):
            return kafka
    return policy_of(await namespace_policies(ctx.meta, name.tenant, name.namespace) or {}, broker_default(ctx))


async def releases_below_view(ctx: AdminContext, name: TopicName) -> bool:
    """Whether retention releases ``name``'s raw records below its key view (a Kafka compact topic)."""
    return _is_kafka_namespace(name.tenant, name.namespace) and \
        kafka_compact_only(await read_topic_configs(ctx.meta, name.base.local))


async def enforce_namespace(ctx: AdminContext, tenant: str, namespace: str, only: TopicName | None = None) -> None:
    """Apply retention to the namespace's topics (``only``: to that topic or its partitions)."""
    default = policy_of(await namespace_policies(ctx.meta, tenant, namespace) or {}, broker_default(ctx))
    own, compacted, compact_only = {}, set(), set()
    if _is_kafka_namespace(tenant, namespace):
        configs = await all_topic_configs(ctx.meta)
        compacted = {topic for topic, values in configs.items() if kafka_compacted(values)}
        compact_only = {topic for topic, values in configs.items() if kafka_compact_only(values)}
        own = {topic: kafka_policy(values) for topic, values in configs.items()}
        own = {topic: policy for topic, policy in own.items() if policy is not None or topic in compacted}
    own.update({local: policy_of({"retention_policies": value})
                for local, value in (await _topic_retentions(ctx, tenant, namespace)).items()})
    if default is None and not own:
        return
    # One topic's streams (its partitions share its name as a prefix), else the namespace's.
    prefix = str(only.base) if only is not None else f"persistent://{tenant}/{namespace}/"
    for stream in await ctx.storage.list_streams(prefix):
        name = TopicName.parse(stream)
        if only is not None and name.base != only.base:
            continue
        policy = own[name.base.local] if name.base.local in own else default
        below_view = name.base.local in compact_only
        if policy is None and not below_view:
            continue
        try:
            await apply(ctx, name, policy, below_view=below_view)
        except Exception:
            log.exception("retention of %s failed", stream)


async def enforce_all(ctx: AdminContext) -> None:
    for tenant in await list_children(ctx.meta, TENANTS_ROOT):
        for namespace in await list_children(ctx.meta, f"{POLICIES_ROOT}/{tenant}"):
            await enforce_namespace(ctx, tenant, namespace)


async def run(ctx: AdminContext, interval: float = INTERVAL) -> None:
    """The periodic pass (a task of the HTTP app)."""
    while True:
        await asyncio.sleep(interval)
        try:
            await enforce_all(ctx)
        except Exception:
            log.exception("retention pass failed")
