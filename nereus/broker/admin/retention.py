"""Namespace retention policies applied to topics through ``nereus.storage.retention.enforce``.

Pulsar's retention keeps *acknowledged* messages for a time or size; messages some
durable subscription has not acknowledged are never removed by it. So the trim is
capped at the slowest durable cursor: ``enforce`` runs on a view of the storage
whose ``trim`` stops at the first entry that cursor still needs. A topic without
subscriptions counts as fully acknowledged, as in Pulsar.

Runs every ``INTERVAL`` seconds over the namespaces with a policy, at once for a
namespace whose policy was just set, and on ``POST .../trim``.
"""

from __future__ import annotations

import asyncio
import json
import logging

from ...ledger.ackset import AckSet
from ...ledger.cursor import cursor_key, list_cursors, stream_partition
from ...ledger.naming import TopicName
from ...topics.policies import POLICIES_ROOT
from ...storage import OffsetOutOfRange, StorageError, StreamNotFound
from ...storage.retention import RetentionPolicy, enforce
from .common import TENANTS_ROOT, AdminContext, list_children, namespace_policies

log = logging.getLogger(__name__)

INTERVAL = 60.0
_MB = 1024 * 1024


def policy_of(policies: dict) -> RetentionPolicy | None:
    """The storage policy of Pulsar's ``RetentionPolicies`` (-1: unlimited); None: nothing to trim."""
    value = policies.get("retention_policies")
    if not value:
        return None
    minutes, size_mb = value.get("retentionTimeInMinutes", 0), value.get("retentionSizeInMB", 0)
    if minutes < 0 and size_mb < 0:
        return None
    return RetentionPolicy(max_bytes=None if size_mb < 0 else size_mb * _MB,
                           max_age_seconds=None if minutes < 0 else minutes * 60.0)


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


async def apply(ctx: AdminContext, name: TopicName, policy: RetentionPolicy) -> int | None:
    """Trim one topic under ``policy``; returns its start offset (None if it does not exist)."""
    topic = ctx.pulsar.topics.get(str(name))
    try:
        handle = topic.handle if topic is not None else await ctx.storage.open_stream(str(name))
    except StreamNotFound:
        return None
    floor = await _floor(ctx, topic, handle.stream_id)
    view = ctx.storage if floor is None else _Capped(ctx.storage, handle, floor)
    before = handle.start_offset()
    start = await enforce(view, handle.stream_id, policy)
    if topic is not None:
        await topic.handle.refresh()
    if start > before:
        log.info("retention: %s trimmed to offset %d", name, start)
    return start


async def enforce_namespace(ctx: AdminContext, tenant: str, namespace: str) -> None:
    policies = await namespace_policies(ctx.meta, tenant, namespace)
    policy = policy_of(policies or {})
    if policy is None:
        return
    prefix = f"persistent://{tenant}/{namespace}/"
    for stream in await ctx.storage.list_streams():
        if stream.startswith(prefix):
            try:
                await apply(ctx, TopicName.parse(stream), policy)
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
