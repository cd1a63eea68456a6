"""Cursors: what a subscription has acknowledged on one stream, in offsets.

A durable cursor lives in the metadata plane next to its stream (same partition
key, so on the stream's shard and dropped with it)::

    /nereus/s/{stream:020d}/cursor/{quoted name}  ->  {"acks": AckSet, "read": offset, ...}

Every write is a CAS (``nereus.meta.cas.update``). When the individual ack ranges
grow past ``SPILL_RANGES`` they spill to an immutable snapshot object
``cursors/{stream:020d}/{quoted name}/{generation:010d}``; the record then carries
the mark-delete position and the snapshot's name (``"snapshot"``, ``"gen"``), so a
metadata write stays small however scattered the acks are. A snapshot is deleted
once a newer record no longer names it; a snapshot written by a writer that died
before its record committed can only be generation ``gen + 1``, which ``open``
deletes (no listing needed). ``persist`` coalesces: while one
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
from ..objstore import ObjectStore
from ..storage.records import stream_partition
from .ackset import AckSet

log = logging.getLogger(__name__)

#: Individual ack ranges kept inline in the metadata record; beyond, a snapshot object.
SPILL_RANGES = 256


def cursor_key(stream_id: int, name: str) -> str:
    return f"{stream_partition(stream_id)}/cursor/{quote(name, safe='')}"


class Cursor:
    """Acknowledgements plus the read position of one subscription on one stream."""

    def __init__(self, meta: MetadataStore | None, stream_id: int, name: str, acks: AckSet, *,
                 durable: bool = True, properties: dict | None = None, objects: ObjectStore | None = None,
                 snapshot_gen: int = 0, snapshot: str | None = None) -> None:
        self.meta = meta
        self.objects = objects
        self._snapshot_gen = snapshot_gen
        self._snapshot = snapshot
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
                   properties: dict | None = None, objects: ObjectStore | None = None) -> tuple["Cursor", bool]:
        """Load the durable cursor, or create it at ``initial``; returns (cursor, created)."""
        rec = await meta.get(cursor_key(stream_id, name), partition_key=stream_partition(stream_id))
        if rec is not None:
            value = json.loads(rec.value)
            acks = AckSet.from_json(value["acks"])
            gen, snapshot = value.get("gen", 0), value.get("snapshot")
            if snapshot is not None:
                if objects is None:
                    raise ValueError(f"cursor {name} has a snapshot object but no object store was given")
                acks = AckSet.from_json(json.loads(await objects.get(snapshot)))
            if objects is not None:  # an orphan of a write whose record never committed
                await objects.delete(snapshot_name(stream_id, name, gen + 1))
            return cls(meta, stream_id, name, acks, properties=value.get("props"), objects=objects,
                       snapshot_gen=gen, snapshot=snapshot), False
        cursor = cls(meta, stream_id, name, AckSet(initial), properties=properties, objects=objects)
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
            record = self.to_json()
            previous, snapshot = self._snapshot, None
            if len(self.acks.ranges) > SPILL_RANGES and self.objects is not None:
                gen = self._snapshot_gen + 1
                snapshot = snapshot_name(self.stream_id, self.name, gen)
                body = json.dumps(record["acks"], separators=(",", ":")).encode()
                await self.objects.delete(snapshot)  # a leftover of a write that never committed
                await self.objects.put_if_absent(snapshot, body)
                record.update(acks={"below": self.acks.acked_below, "ranges": []}, snapshot=snapshot, gen=gen)
            else:
                record["gen"] = self._snapshot_gen
            value = json.dumps(record, separators=(",", ":")).encode()
            await cas.update(self.meta, cursor_key(self.stream_id, self.name), lambda _old: value,
                             partition_key=stream_partition(self.stream_id))
            self._persisted = max(self._persisted, carried)
            if snapshot is not None:
                self._snapshot_gen, self._snapshot = record["gen"], snapshot
            else:
                self._snapshot = None
            if previous is not None and previous != self._snapshot:
                await self.objects.delete(previous)  # no record names it any more

    async def delete(self) -> None:
        if self.durable:
            await self.meta.delete(cursor_key(self.stream_id, self.name),
                                   partition_key=stream_partition(self.stream_id))
            if self._snapshot is not None and self.objects is not None:
                await self.objects.delete(self._snapshot)
        self.durable = False


def snapshot_name(stream_id: int, name: str, gen: int) -> str:
    return f"cursors/{stream_id:020d}/{quote(name, safe='')}/{gen:010d}"


async def list_cursors(meta: MetadataStore, stream_id: int) -> list[str]:
    """Names of the durable cursors of a stream."""
    prefix = f"{stream_partition(stream_id)}/cursor/"
    return [unquote(k[len(prefix):]) async for k in
            meta.list(prefix, prefix + "\U0010ffff", partition_key=stream_partition(stream_id))]


__all__ = ["Cursor", "cursor_key", "list_cursors", "stream_partition"]
