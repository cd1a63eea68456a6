"""Grouped uploads: the objects of one WAL block reach the object store as ONE object.

On WAL replicas every flush is an object; uploading each under its own name would cost a
store request per flush (hundreds a second under load, where the object profile makes a
few dozen). A writer whose name prefix carries a group size (``...~E.W.A.g{size}-``, see
``grouped_prefix``) uploads instead, once a block of names is closed and every name of it
sealed, one *group object* holding the block's committed objects end to end, under a name
derived from the block (``group_name``). Index entries keep naming the member objects:

- its record (``/nereus/objects/{group}``) lists where each member lies in it
  (``"group": {seq: [position, length]}``) and counts the members still alive
  (``"live": [[seq, -1], ...]``): readers that miss a member in the store (its block's
  marker gone) find it there;
- the collector, deleting a freed member, releases it from its group; the group is
  freed, then deleted, once no member is alive;
- a writer that dies before its group is sealed leaves its block's marker: the collector
  uploads the block's objects one by one from the replicas (as for any dead writer's
  block) and claims the group's name, so a late put of it fails.

A member may also be in the store under its own name (uploaded by the collector after its
writer died): a reader that does not find it in its group reads it there.
"""

from __future__ import annotations

import re
from collections import OrderedDict

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion, cas
from ..objstore import ObjectStore
from . import gc, records

_SEQ_DIGITS = 10
_GROUP_SUFFIX = ".group"
_SIZE = re.compile(r"\.g(\d+)-$")
DIRECTORIES_KEPT = 1024  # group directories a reader remembers


def grouped_prefix(prefix: str, block_size: int) -> str:
    """The name prefix (ending ``-``) of a writer whose blocks are uploaded as groups."""
    return f"{prefix}.g{block_size}-"


def _split(object_key: str) -> tuple[str, int, int] | None:
    """(prefix, sequence, block size) of a member name; None for names of other writers."""
    prefix, seq = object_key[:-_SEQ_DIGITS], object_key[-_SEQ_DIGITS:]
    match = _SIZE.search(prefix)
    if match is None or not seq.isdigit():
        return None
    return prefix, int(seq), int(match.group(1))


def is_grouped(object_key: str) -> bool:
    """Whether the object is uploaded in its block's group rather than under its own name."""
    return _split(object_key) is not None


def group_name(prefix: str, block_first: int) -> str:
    """The group object of the block of ``prefix`` names starting at ``block_first``."""
    return f"{prefix}{block_first:0{_SEQ_DIGITS}d}{_GROUP_SUFFIX}"


def group_of(object_key: str) -> tuple[str, int] | None:
    """(group object name, member sequence) of a grouped member name."""
    split = _split(object_key)
    if split is None:
        return None
    prefix, seq, size = split
    return group_name(prefix, seq - seq % size), seq


def seal_value(members: dict[int, tuple[int, int]], ts_ms: int) -> bytes:
    return records.encode({"state": "sealed", "live": [[seq, -1] for seq in sorted(members)],
                           "group": {str(seq): list(span) for seq, span in sorted(members.items())},
                           "ts": ts_ms})


async def seal(meta: MetadataStore, group: str, members: dict[int, tuple[int, int]], ts_ms: int) -> bool:
    """Create the group's record (where each member lies, every member alive); False when a
    record exists that is not this one (the collector claimed the group's name)."""
    value = seal_value(members, ts_ms)
    try:
        await meta.put(records.object_key(group), value, expected_version_id=EXPECT_ABSENT)
        return True
    except UnexpectedVersion:
        existing = await meta.get(records.object_key(group))
        return existing is not None and records.decode(existing.value).get("group") == records.decode(value)["group"]


async def release_member(meta: MetadataStore, object_key: str) -> None:
    """The member is deleted: its group counts one member fewer (idempotent); the last one
    frees the group."""
    located = group_of(object_key)
    if located is None:
        return
    group, seq = located
    freed = False

    def apply(old: bytes | None) -> bytes | None:
        nonlocal freed
        freed = False
        if old is None:
            return None  # no group was sealed (its writer died first): nothing counts the member
        value = records.decode(old)
        live = [pair for pair in value.get("live", []) if pair != [seq, -1]]
        if live == value.get("live"):
            return None
        freed = not live
        return records.encode({**value, "live": live})

    await cas.update(meta, records.object_key(group), apply)
    if freed:
        await gc.mark_free(meta, group)


class GroupReader:
    """Reads grouped members from their group objects (directories cached, bounded)."""

    def __init__(self, meta: MetadataStore, objects: ObjectStore):
        self.meta = meta
        self.objects = objects
        self._directories: OrderedDict[str, dict[str, list[int]]] = OrderedDict()

    async def read(self, object_key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of the member, read from its group; None when it is in no group
        (not a grouped name, no group sealed, or the group does not hold it)."""
        located = group_of(object_key)
        if located is None:
            return None
        group, seq = located
        directory = await self._directory(group)
        span = directory.get(str(seq)) if directory is not None else None
        if span is None:
            return None
        position, length = span
        end = min(end, length)
        if start >= end:
            return b""
        return await self.objects.get(group, position + start, position + end)

    async def _directory(self, group: str) -> dict[str, list[int]] | None:
        directory = self._directories.get(group)
        if directory is not None:
            self._directories.move_to_end(group)
            return directory
        record = await self.meta.get(records.object_key(group))
        if record is None:
            return None
        directory = records.decode(record.value).get("group")
        if directory is None:
            return None
        self._directories[group] = directory
        if len(self._directories) > DIRECTORIES_KEPT:
            self._directories.popitem(last=False)
        return directory


__all__ = ["GroupReader", "group_name", "group_of", "grouped_prefix", "is_grouped", "release_member", "seal",
           "seal_value"]
