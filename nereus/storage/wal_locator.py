"""Where an object not yet in the object store is: its block's WAL replicas.

Objects written to WAL replicas carry the durability in their name
(``wal/{ms}-{node}~{E}.{W}.{A}[.g{size}]-{seq}``), and their block's pending marker lists the
block's ensemble until every object of it is uploaded. A reader that misses such
an object in the store looks the marker up and reads the bytes from a replica. No
marker means the upload finished meanwhile (the marker goes after it): the store
has it now.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from ..meta import MetadataStore
from . import records, wal_replicas
from .wal_replicas import ReplicaDirectory

log = logging.getLogger(__name__)

#: ``held(key, start, end)``: the bytes of an object this process still holds in memory for upload.
HeldBytes = Callable[[str, int, int], "bytes | None"]

_SEQ_DIGITS = 10
UPLOADED_KEPT = 4096  # objects remembered as uploaded (each saves a marker lookup per read)


def on_replicas(object_key: str) -> bool:
    """Whether the object was written to WAL replicas first (its name says so)."""
    return object_key.startswith("wal/") and "~" in object_key and object_key[-_SEQ_DIGITS:].isdigit()


def split_name(object_key: str) -> tuple[str, int]:
    """(prefix, sequence) of a WAL object name."""
    return object_key[:-_SEQ_DIGITS], int(object_key[-_SEQ_DIGITS:])


async def find_block(meta: MetadataStore, object_key: str) -> dict | None:
    """The pending marker (its value) of the block the object was named from, if it still exists."""
    prefix, seq = split_name(object_key)
    lo = records.gc_pending_key(prefix + "0" * _SEQ_DIGITS)
    hi = records.gc_pending_key(object_key) + "\x01"
    found = None
    async for rec in meta.range_scan(lo, hi):
        value = records.decode(rec.value)
        if value.get("prefix") == prefix and value["first"] <= seq < value["first"] + value["count"]:
            found = {**value, "marker": rec.key}
    return found


def replicas_of(block: dict, object_key: str) -> list[str]:
    """The write set of ``object_key`` in ``block`` (a marker value with its ``wal`` field)."""
    wal = block["wal"]
    _, seq = split_name(object_key)
    return wal_replicas.write_set(wal["ensemble"], wal["write"], seq - block["first"])


class WalLocator:
    """Reads objects from WAL replicas while they are not in the object store."""

    def __init__(self, meta: MetadataStore, directory: ReplicaDirectory | None):
        self.meta = meta
        self.directory = directory
        self.held: list[HeldBytes] = []  # this process's writers' uploads still in memory
        # Objects whose block was seen uploaded: the store has them, no marker lookup again.
        self._uploaded: OrderedDict[str, None] = OrderedDict()

    async def read(self, object_key: str, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` of the object from memory or a replica; None when its block
        is gone (uploaded meanwhile: read the store again). Raises WalUnavailable when its
        replicas cannot be reached, EntryNotFound when none holds it."""
        for held in self.held:
            data = held(object_key, start, end)
            if data is not None:
                return data
        if object_key in self._uploaded:
            return None
        block = await find_block(self.meta, object_key)
        if block is None:
            self._uploaded[object_key] = None
            if len(self._uploaded) > UPLOADED_KEPT:
                self._uploaded.popitem(last=False)
            return None
        if "wal" not in block:
            return None
        if self.directory is None:
            raise wal_replicas.WalUnavailable(f"object {object_key} is on WAL replicas and this process "
                                              "cannot reach them")
        replicas = replicas_of(block, object_key)
        await self.directory.prepare(replicas)
        return await wal_replicas.read(self.directory, replicas, object_key, start, end)




async def drop_finished_blocks(meta: MetadataStore, store) -> int:
    """Drop the blocks a WAL replica (``store``) holds whose pending marker is gone; returns how many.

    A block is named by its marker's key, and the marker goes only once every object of
    the block is in the object store (or never committed): the metadata plane, not a
    listing of the store, says what a replica may forget.
    """
    dropped = 0
    for block in store.blocks():
        if block.startswith(records.GC_PENDING_ROOT + "/") and await meta.get(block) is None:
            await store.drop(block)
            dropped += 1
    return dropped


__all__ = ["WalLocator", "drop_finished_blocks", "find_block", "on_replicas", "replicas_of", "split_name"]
