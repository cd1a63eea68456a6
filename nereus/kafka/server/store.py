"""The group coordinator's registry of groups and the committed offsets in metadata.

Offsets: ``/nereus/kafka/offsets/{group}/{topic}:{partition:010d}`` ->
``{"offset", "epoch", "metadata", "ts"}`` (names URL-quoted; one level below the
group so a group's offsets are one range in the hierarchical key order). A commit
is acknowledged after its records are written.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from urllib.parse import quote, unquote

from ...storage.records import subtree_ranges
from .groups import DEAD, EMPTY, GROUPS_ROOT, Group, group_key

log = logging.getLogger(__name__)

OFFSETS_ROOT = "/nereus/kafka/offsets/"
EXPIRY_INTERVAL = 0.5
_END = "\U0010ffff"


def _group_prefix(group_id: str) -> str:
    return OFFSETS_ROOT + quote(group_id, safe="") + "/"


def offset_key(group_id: str, topic: str, partition: int) -> str:
    return f"{_group_prefix(group_id)}{quote(topic, safe='')}:{partition:010d}"


class Coordinator:
    """Loads groups on first use, persists them, expires sessions."""

    def __init__(self, meta) -> None:
        self.meta = meta
        self.groups: dict[str, Group] = {}
        self._loading: dict[str, asyncio.Future] = {}
        self._dirty: set[str] = set()
        self._writers: dict[str, asyncio.Task] = {}
        self._expiry: asyncio.Task | None = None

    def start(self) -> None:
        self._expiry = asyncio.ensure_future(self._expire_loop())

    async def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        await asyncio.gather(*self._writers.values(), return_exceptions=True)

    async def group(self, group_id: str, create: bool = True) -> Group | None:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        loading = self._loading.get(group_id)
        if loading is None:
            loading = self._loading[group_id] = asyncio.ensure_future(self._load(group_id))
            loading.add_done_callback(lambda _f: self._loading.pop(group_id, None))
        group = await asyncio.shield(loading)
        if group is None and create:
            group = self.groups.setdefault(group_id, Group(self, group_id))
        return group

    async def _load(self, group_id: str) -> Group | None:
        rec = await self.meta.get(group_key(group_id))
        if group_id in self.groups:
            return self.groups[group_id]
        if rec is None:
            return None
        group = Group(self, group_id)
        group.restore(rec.value)
        self.groups[group_id] = group
        return group

    def persist(self, group: Group) -> None:
        self._dirty.add(group.group_id)
        task = self._writers.get(group.group_id)
        if task is None or task.done():
            self._writers[group.group_id] = asyncio.ensure_future(self._write(group.group_id))

    async def _write(self, group_id: str) -> None:
        while group_id in self._dirty:
            self._dirty.discard(group_id)
            group = self.groups.get(group_id)
            try:
                if group is None or group.state == DEAD:
                    await self.meta.delete(group_key(group_id))
                else:
                    await self.meta.put(group_key(group_id), group.to_json())
            except Exception:
                log.exception("kafka group %s: persisting failed", group_id)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(EXPIRY_INTERVAL)
            now = time.monotonic()
            for group in list(self.groups.values()):
                try:
                    group.expire(now)
                except Exception:
                    log.exception("kafka group %s: expiry failed", group.group_id)

    async def list_groups(self) -> list[Group]:
        names = set(self.groups)
        async for key in self.meta.list(GROUPS_ROOT, GROUPS_ROOT + _END):
            names.add(unquote(key[len(GROUPS_ROOT):]))
        lo, hi = subtree_ranges(OFFSETS_ROOT.rstrip("/"))[1]  # keys two levels below the root
        async for key in self.meta.list(lo, hi):
            names.add(unquote(key[len(OFFSETS_ROOT):].split("/", 1)[0]))
        return [g for g in [await self.group(n) for n in sorted(names)] if g is not None]

    async def delete_group(self, group_id: str) -> int:
        group = await self.group(group_id, create=False)
        has_offsets = False
        async for _ in self.meta.list(_group_prefix(group_id), _group_prefix(group_id) + _END, page_size=1):
            has_offsets = True
            break
        if group is None and not has_offsets:
            return 69  # GROUP_ID_NOT_FOUND
        if group is not None and group.state != EMPTY:
            return 68  # NON_EMPTY_GROUP
        if group is not None:
            group.state = DEAD
            self.groups.pop(group_id, None)
        await self.meta.delete(group_key(group_id))
        await self.meta.delete_range(_group_prefix(group_id), _group_prefix(group_id) + _END)
        return 0

    # -- offsets ------------------------------------------------------------------------
    async def commit(self, group_id: str, topic: str, partition: int, offset: int, epoch: int,
                     metadata: str | None) -> None:
        value = json.dumps({"offset": offset, "epoch": epoch, "metadata": metadata,
                            "ts": int(time.time() * 1000)}).encode()
        await self.meta.put(offset_key(group_id, topic, partition), value)

    async def fetch_offsets(self, group_id: str) -> dict[tuple[str, int], dict]:
        prefix = _group_prefix(group_id)
        out = {}
        async for rec in self.meta.range_scan(prefix, prefix + _END):
            topic, partition = rec.key[len(prefix):].rsplit(":", 1)
            out[(unquote(topic), int(partition))] = json.loads(rec.value)
        return out

    async def fetch_offset(self, group_id: str, topic: str, partition: int) -> dict | None:
        rec = await self.meta.get(offset_key(group_id, topic, partition))
        return json.loads(rec.value) if rec is not None else None


__all__ = ["Coordinator", "OFFSETS_ROOT", "offset_key"]
