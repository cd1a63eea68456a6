"""Cursors: what a subscription has acknowledged on one stream, in offsets.

A durable cursor lives in the metadata plane next to its stream (same partition
key, so on the stream's shard and dropped with it)::

    /nereus/s/{stream:020d}/cursor/{quoted name}  ->  {"acks": AckSet, "read": offset, ...}

Every write is a CAS (``nereus.meta.cas.update``). ``persist`` coalesces: while one
write is in flight, later callers wait for the next one, which carries all their
changes, so a burst of acks costs two writes, not one per ack. A non-durable cursor
(readers) has the same interface and never touches the metadata plane.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from urllib.parse import quote, unquote

from ..meta import MetadataStore
from ..meta import cas
from ..storage.records import stream_partition
from .ackset import AckSet

log = logging.getLogger(__name__)


def cursor_key(stream_id: int, name: str) -> str:
    return f"{stream_partition(stream_id)}/cursor/{quote(name, safe='')}"


class Cursor:
    """Acknowledgements plus the read position of one subscription on one stream."""

    def __init__(self, meta: MetadataStore | None, stream_id: int, name: str, acks: AckSet, *,
                 durable: bool = True, properties: dict | None = None) -> None:
        self.meta = meta
        self.stream_id = stream_id
        self.name = name
        self.acks = acks
        self.durable = durable and meta is not None
        self.read_position = acks.acked_below
        self.properties = dict(properties or {})
        self._changes = 0  # bumped by every mutation
        self._persisted = 0  # value of _changes carried by the last completed write
        self._lock = asyncio.Lock()

    @classmethod
    async def open(cls, meta: MetadataStore, stream_id: int, name: str, *, initial: int,
                   properties: dict | None = None) -> tuple["Cursor", bool]:
        """Load the durable cursor, or create it at ``initial``; returns (cursor, created)."""
        rec = await meta.get(cursor_key(stream_id, name), partition_key=stream_partition(stream_id))
        if rec is not None:
            value = json.loads(rec.value)
            return cls(meta, stream_id, name, AckSet.from_json(value["acks"]),
                       properties=value.get("props")), False
        cursor = cls(meta, stream_id, name, AckSet(initial), properties=properties)
        cursor._changes = 1
        await cursor.persist()
        return cursor, True

    @classmethod
    def ephemeral(cls, stream_id: int, name: str, *, initial: int) -> "Cursor":
        """A non-durable cursor (a reader's): lives only in this process."""
        return cls(None, stream_id, name, AckSet(initial), durable=False)

    # -- mutations (in memory; call persist() to make them durable) --------------------
    def ack(self, start: int, end: int) -> None:
        self.acks.ack(start, end)
        self._changes += 1

    def ack_cumulative(self, upto_inclusive: int) -> None:
        self.acks.ack_cumulative(upto_inclusive)
        self._changes += 1

    def reset(self, position: int) -> None:
        """Seek: everything below ``position`` counts as acknowledged, nothing above."""
        self.acks.reset(position)
        self.read_position = position
        self._changes += 1

    @property
    def dirty(self) -> bool:
        return self._changes != self._persisted

    def to_json(self) -> dict:
        return {"acks": self.acks.to_json(), "read": self.read_position, "props": self.properties,
                "ts": int(time.time() * 1000)}

    async def persist(self) -> None:
        """Make every change made before this call durable (no-op for ephemeral cursors)."""
        if not self.durable:
            self._persisted = self._changes
            return
        target = self._changes
        async with self._lock:
            if self._persisted >= target:
                return  # a write that started after our change already carried it
            carried = self._changes
            value = json.dumps(self.to_json(), separators=(",", ":")).encode()
            await cas.update(self.meta, cursor_key(self.stream_id, self.name), lambda _old: value,
                             partition_key=stream_partition(self.stream_id))
            self._persisted = max(self._persisted, carried)

    async def delete(self) -> None:
        if self.durable:
            await self.meta.delete(cursor_key(self.stream_id, self.name),
                                   partition_key=stream_partition(self.stream_id))
        self.durable = False


async def list_cursors(meta: MetadataStore, stream_id: int) -> list[str]:
    """Names of the durable cursors of a stream."""
    prefix = f"{stream_partition(stream_id)}/cursor/"
    return [unquote(k[len(prefix):]) async for k in
            meta.list(prefix, prefix + "\U0010ffff", partition_key=stream_partition(stream_id))]


__all__ = ["Cursor", "cursor_key", "list_cursors", "stream_partition"]
