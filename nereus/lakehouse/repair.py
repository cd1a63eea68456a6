"""Catalog repair: bring the built-in tables of a catalog back to the metadata plane's truth.

The offset index is the truth of which compacted objects hold a topic; a table is a
copy of that list in an external catalog, which can fall behind (a lost commit, a
catalog restored from a backup, a table dropped by hand) or run ahead (it still lists
objects retention or a later compaction removed from the index). ``repair`` checks
every table the catalog has and every table the metadata plane says should exist
(the topics whose compacted objects are pinned by a table, found from the pins),
then re-syncs each one that differs (``sbt.sync``: file sets compared by path, so a
re-commit never lists an object twice and no row is duplicated). Tables of topics
that no longer exist are dropped, and pins left by tables nobody can name any more
are released.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from ..ledger.naming import TopicName
from ..meta import MetadataStore
from ..storage import gc, view
from ..storage.compaction import compacted_stream_id
from . import rows as _rows
from . import sbt

log = logging.getLogger(__name__)

_HOLDER_PREFIX = "sbt:"


@dataclass
class RepairReport:
    """What a repair found and (unless ``dry_run``) did."""

    dry_run: bool
    checked: int = 0
    in_sync: int = 0
    repaired: list[sbt.SyncReport] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # tables of topics that no longer exist
    released_pins: int = 0  # pins of tables whose topic cannot be named any more


async def topics_with_tables(meta: MetadataStore, catalog,
                             pins: list[tuple[str, str]]) -> tuple[set[str], list[tuple[str, str]]]:
    """Topics whose table the catalog has or the ``pins`` say it should have; and the orphan pins
    (their stream is gone, so the topic cannot be named)."""
    topics = set(await asyncio.to_thread(sbt.managed_topics, catalog))
    orphans = []
    names: dict[int, str | None] = {}
    for object_key, holder in pins:
        stream = compacted_stream_id(object_key)
        if stream is None:
            continue
        if stream not in names:
            names[stream] = await view.stream_name(meta, stream)
        if names[stream] is None:
            orphans.append((object_key, holder))
        else:
            topics.add(str(TopicName.parse(names[stream]).base))
    return topics, orphans


async def _exists(meta: MetadataStore, topic: str) -> bool:
    try:
        await _rows.topic_ranges(meta, topic, must_exist=True)
    except _rows.TopicNotFound:
        return False
    return True


async def repair(meta: MetadataStore, catalog, objects_url: str, *, topics: list[str] | None = None,
                 also: list[str] = (), dry_run: bool = False) -> RepairReport:
    """Check the tables of ``topics`` (default: every table there is or should be) and of ``also``
    (topics just compacted, whose table may not exist yet), and repair them."""
    report = RepairReport(dry_run)
    pins = await gc.pins(meta, _HOLDER_PREFIX)  # one scan of every pin for all the tables checked
    pinned: dict[str, list[str]] = {}
    for object_key, holder in pins:
        pinned.setdefault(holder, []).append(object_key)
    if topics is None:
        candidates, orphans = await topics_with_tables(meta, catalog, pins)
    else:
        candidates, orphans = set(), []
    candidates |= {str(TopicName.parse(t).base) for t in (*(topics or ()), *also)}
    for topic in sorted(candidates):
        report.checked += 1
        if not await _exists(meta, topic):
            report.dropped.append(topic)
            if not dry_run:
                await sbt.drop(meta, catalog, objects_url, topic)
                log.warning("repair: %s no longer exists: its table is dropped", topic)
            continue
        synced = await sbt.sync(meta, catalog, objects_url, topic, dry_run=dry_run,
                                pinned=pinned.get(sbt.holder(topic), []))
        if synced.added or synced.removed or (synced.created and synced.stale):
            report.repaired.append(synced)
            if not dry_run and synced.stale:
                log.warning("repair: table %s was %s: +%d -%d data files", synced.table, describe(synced),
                            synced.added, synced.removed)
        else:
            report.in_sync += 1
    report.released_pins = len(orphans)
    if not dry_run:
        for object_key, holder in orphans:
            await gc.unpin(meta, object_key, holder)
    return report


def describe(synced: sbt.SyncReport) -> str:
    """How a table differed from the truth."""
    if synced.created:
        what = "missing"
    elif synced.added and synced.removed:
        what = "behind and ahead"
    else:
        what = "behind" if synced.added else "ahead"
    return what if synced.stale else f"{what} (changes not synced yet)"
