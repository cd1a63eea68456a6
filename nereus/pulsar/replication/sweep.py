"""Resume replication of topics that nobody loads: after a restart, an owner's death, an idle unload.

Replicators run on loaded topics, and a topic loads when a client uses it. A topic whose
producers are gone with entries not yet replicated would wait for its next client; each
broker therefore looks, every ``SWEEP_SECONDS``, through the topics of the replicated
namespaces for a replication cursor behind the stream's end, and loads those whose owner
it is (or becomes: the lookup places an unowned topic as any lookup does). The loaded
topic stays loaded while its backlog lasts, then unloads when idle as any topic.

Each sweep reads the stream list of every replicated namespace (and replicated topic) and one
cursor per topic and remote, never the streams of other namespaces: fine for thousands of
replicated topics, not for millions (then a per-namespace index of lagging topics is the next step).
"""

from __future__ import annotations

import asyncio
import json
import logging
from urllib.parse import unquote

from ...ledger.cursor import Cursor
from ...ledger.naming import TopicName
from ...ledger.clusters import TOPIC_REPLICATION_FIELD
from ...ledger.policies import POLICIES_ROOT, TENANTS_ROOT, topic_policies_prefix
from ...topics.placement import NotOwner
from .replicator import cursor_name

log = logging.getLogger(__name__)

SWEEP_SECONDS = 30.0
FIRST_SWEEP_SECONDS = 2.0
#: The end of a range of a key's children: above any last segment.
_LAST = "/\U0010ffff"


async def replicated_namespaces(meta, local: str) -> dict[str, list[str]]:
    """``tenant/namespace`` -> its remote clusters, for each namespace replicated from here."""
    out = {}
    # Keys sort level by level (Oxia's order): a range below a key holds its children only,
    # and a namespace's record is a grandchild of POLICIES_ROOT. So: each tenant's children.
    tenants = [key[len(TENANTS_ROOT) + 1:] async for key in meta.list(TENANTS_ROOT + "/", TENANTS_ROOT + _LAST)]
    for tenant in tenants:
        prefix = f"{POLICIES_ROOT}/{tenant}/"
        async for rec in meta.range_scan(prefix, f"{POLICIES_ROOT}/{tenant}{_LAST}"):
            try:
                clusters = json.loads(rec.value).get("replication_clusters") or []
            except ValueError:
                continue
            remotes = [c for c in clusters if c != local]
            if remotes:
                out[rec.key[len(POLICIES_ROOT) + 1:]] = remotes
    return out


async def replicated_topics(meta, local: str) -> dict[str, list[str]]:
    """``tenant/namespace/topic`` -> its remote clusters, for each topic with a replication policy of
    its own (a partitioned topic's name stands for its partitions; an empty list sets nothing)."""
    out = {}
    tenants = [key[len(TENANTS_ROOT) + 1:] async for key in meta.list(TENANTS_ROOT + "/", TENANTS_ROOT + _LAST)]
    for tenant in tenants:
        namespaces = [key[len(POLICIES_ROOT) + 1:]
                      async for key in meta.list(f"{POLICIES_ROOT}/{tenant}/", f"{POLICIES_ROOT}/{tenant}{_LAST}")]
        for path in namespaces:
            prefix = topic_policies_prefix(*path.split("/", 1))
            async for rec in meta.range_scan(prefix + "/", prefix + _LAST):
                try:
                    clusters = json.loads(rec.value).get(TOPIC_REPLICATION_FIELD) or []
                except ValueError:
                    continue
                if clusters:
                    out[f"{path}/{unquote(rec.key[len(prefix) + 1:])}"] = [c for c in clusters if c != local]
    return out


async def lagging_topics(manager) -> list[TopicName]:
    """Persistent topics replicated from here (by their namespace's or their own policy), not loaded
    here, whose replication is behind."""
    namespaces = await replicated_namespaces(manager.meta, manager.local_cluster)
    topics = await replicated_topics(manager.meta, manager.local_cluster)
    if not namespaces and not any(topics.values()):
        return []
    storage = manager.registry.storage
    # Only the replicated namespaces' streams and those of topics with a policy of their own
    # (a topic's name is a prefix of its partitions'): not every stream of the cluster.
    prefixes = {f"persistent://{path}/" for path in namespaces}
    prefixes.update(f"persistent://{path}" for path, remotes in topics.items() if remotes)
    streams = sorted({s for prefix in prefixes for s in await storage.list_streams(prefix)})
    out = []
    for stream in streams:
        name = TopicName.parse(stream)
        base = name.base
        remotes = topics.get(f"{base.tenant}/{base.namespace}/{base.local}")
        if remotes is None:
            remotes = namespaces.get(f"{name.tenant}/{name.namespace}")
        if not remotes or manager.registry.loaded(name) is not None:
            continue
        stream_id = await storage.stream_id(stream)
        end = (await storage.tail(stream_id)).next
        for remote in remotes:
            cursor = await Cursor.load(manager.meta, stream_id, cursor_name(remote), objects=manager.objects)
            if cursor is not None and cursor.acks.acked_below < end:
                out.append(name)
                break
    return out


async def sweep_once(manager) -> int:
    """Load the lagging topics this broker owns; returns how many were loaded."""
    loaded = 0
    registry = manager.registry
    placement = registry.placement
    for name in await lagging_topics(manager):
        try:
            if (await placement.owner(str(name))).name != placement.local.name:
                continue  # its owner's sweep loads it
            await registry.claim(name)
            await registry.get(name)
        except NotOwner:
            continue  # its owner's sweep loads it
        except Exception as exc:  # an owner not reachable yet: the next sweep
            log.info("%s: not loaded to resume its replication: %s", name, exc)
            continue
        log.info("%s: loaded to resume its replication", name)
        loaded += 1
    return loaded


async def run_sweeps(manager, *, interval: float = SWEEP_SECONDS, first: float = FIRST_SWEEP_SECONDS) -> None:
    await asyncio.sleep(first)
    while True:
        try:
            await sweep_once(manager)
        except Exception as exc:  # the next sweep tries again
            log.warning("replication sweep failed: %s", exc)
        await asyncio.sleep(interval)


__all__ = ["lagging_topics", "replicated_namespaces", "replicated_topics", "run_sweeps", "sweep_once"]
