"""Cursors: what a subscription has acknowledged on one stream, in offsets.

A durable cursor lives in the metadata plane next to its stream (same partition
key, so on the stream's shard and dropped with it)::

    /nereus/s/{stream:020d}/cursor/{quoted name}  ->  {"acks": AckSet, "read": offset, ...}

Every write is a compare-and-set on the version this copy last read or wrote
(``EXPECT_ABSENT`` to create): if anyone else (another broker on the same metadata)
wrote the record in between, the write fails, the copy is fenced for good
(``CursorFenced``) and its owner must reload the cursor instead of overwriting the
other writer's acknowledgements. When the individual ack ranges grow past
``SPILL_RANGES`` they spill to an immutable snapshot object
``cursors/{stream:020d}/{quoted name}/{generation:010d}-{unique}``; the record then
carries the mark-delete position and the snapshot's name (``"snapshot"``, ``"gen"``),
so a metadata write stays small however scattered the acks are. Objects are never
rewritten: every snapshot gets a fresh name and is written put-if-absent before the
record names it; the previous snapshot is deleted only after a record that no longer
names it committed, and a snapshot whose record lost the race is deleted by its writer.
(A writer that dies between its object put and its record write leaves an unnamed
object behind.) ``persist`` coalesces: while one
write is in flight, later callers wait for the next one, which carries all their
changes, so a burst of acks costs two writes, not one per ack. A non-durable cursor
(readers) has the same interface and never touches the metadata plane.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Callable
from urllib.parse import quote, unquote

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion, cas
from ..objstore import ObjectStore
from ..storage import metrics as storage_metrics
from ..storage.records import stream_partition
from .ackset import AckSet
from .errors import CursorFenced

log = logging.getLogger(__name__)

#: Individual ack ranges kept inline in the metadata record; beyond, a snapshot object.
SPILL_RANGES = 256


def cursor_key(stream_id: int, name: str) -> str:
    """The metadata key of the durable cursor ``name`` of stream ``stream_id``."""
    return f"{stream_partition(stream_id)}/cursor/{quote(name, safe='')}"


class Cursor:
    """Acknowledgements plus the read position of one subscription on one stream."""

    def __init__(self, meta: MetadataStore | None, stream_id: int, name: str, acks: AckSet, *,
                 durable: bool = True, properties: dict | None = None, objects: ObjectStore | None = None,
                 snapshot_gen: int = 0, snapshot: str | None = None, version_id: int | None = None) -> None:
        self.meta = meta
        self.objects = objects
        self._snapshot_gen = snapshot_gen
        self._snapshot = snapshot
        self._version_id = version_id  # of the record as this copy last read or wrote it; None: absent
        self.fenced = False  # someone else wrote the record: this copy must not write again
        #: Called once when the cursor becomes fenced (its owner stops using it).
        self.on_fenced: Callable[[CursorFenced], None] | None = None
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
        async def load_or_create() -> tuple[Cursor, bool]:
            loaded = await cls._load(meta, stream_id, name, objects)
            if loaded is not None:
                return loaded, False
            cursor = cls(meta, stream_id, name, AckSet(initial), properties=properties, objects=objects)
            cursor._changes = 1
            try:
                await cursor.persist()
            except CursorFenced:  # another broker created it first: use theirs
                raise cas.ReadAgain from None
            return cursor, True

        return await cas.retry(load_or_create)

    @classmethod
    async def load(cls, meta: MetadataStore, stream_id: int, name: str,
                   objects: ObjectStore | None = None) -> "Cursor | None":
        """The durable cursor as stored, or None if there is none."""
        return await cls._load(meta, stream_id, name, objects)

    @classmethod
    async def _load(cls, meta: MetadataStore, stream_id: int, name: str,
                    objects: ObjectStore | None) -> "Cursor | None":
        rec = await meta.get(cursor_key(stream_id, name), partition_key=stream_partition(stream_id))
        if rec is None:
            return None
        value = json.loads(rec.value)
        acks = AckSet.from_json(value["acks"])
        snapshot = value.get("snapshot")
        if snapshot is not None:
            if objects is None:
                raise ValueError(f"cursor {name} has a snapshot object but no object store was given")
            acks = AckSet.from_json(json.loads(await objects.get(snapshot)))
        return cls(meta, stream_id, name, acks, properties=value.get("props"), objects=objects,
                   snapshot_gen=value.get("gen", 0), snapshot=snapshot, version_id=rec.version.version_id)

    @classmethod
    def ephemeral(cls, stream_id: int, name: str, *, initial: int) -> "Cursor":
        """A non-durable cursor (a reader's): lives only in this process."""
        return cls(None, stream_id, name, AckSet(initial), durable=False)

    # -- mutations (in memory; call persist() to make them durable) --------------------
    def ack(self, start: int, end: int) -> None:
        """Acknowledge offsets ``[start, end)``."""
        self.acks.ack(start, end)
        self._changes += 1

    def ack_ranges(self, ranges: list[tuple[int, int]]) -> None:
        """Acknowledge each of ``ranges`` (sorted, disjoint half-open ranges)."""
        self.acks.ack_ranges(ranges)
        self._changes += 1

    def ack_cumulative(self, upto_inclusive: int) -> None:
        """Acknowledge every offset up to ``upto_inclusive``."""
        self.acks.ack_cumulative(upto_inclusive)
        self._changes += 1

    def set_property(self, key: str, value) -> None:
        """Set (None: remove) a property, persisted with the cursor's next write."""
        if value is None:
            self.properties.pop(key, None)
        else:
            self.properties[key] = value
        self._changes += 1

    def reset(self, position: int) -> None:
        """Seek: everything below ``position`` counts as acknowledged, nothing above."""
        self.acks.reset(position)
        self.read_position = position
        self._changes += 1

    @property
    def dirty(self) -> bool:
        """True while a change is not yet durable (never once fenced: it cannot be)."""
        return self._changes != self._persisted and not self.fenced

    def to_json(self) -> dict:
        return {"acks": self.acks.to_json(), "read": self.read_position, "props": self.properties,
                "ts": int(time.time() * 1000)}

    async def persist(self) -> None:
        """Make every change made before this call durable (no-op for ephemeral cursors).

        Raises ``CursorFenced`` if the record changed since this copy last read or
        wrote it; the copy is then unusable (``fenced``) and must be reloaded.
        """
        if not self.durable:
            self._persisted = self._changes
            return
        target = self._changes
        async with self._lock:
            self._check_not_fenced()
            if self._persisted >= target:
                return  # a write that started after our change already carried it
            carried = self._changes
            record = self.to_json()
            previous, snapshot = self._snapshot, None
            if len(self.acks.ranges) > SPILL_RANGES and self.objects is not None:
                snapshot = await self._write_snapshot(record)
            else:
                record["gen"] = self._snapshot_gen
            await self._write_record(record, snapshot)
            self._persisted = max(self._persisted, carried)
            if snapshot is not None:
                self._snapshot_gen = record["gen"]
            self._snapshot = snapshot
            if previous is not None and previous != snapshot:
                await self.objects.delete(previous)  # the committed record no longer names it

    async def _write_snapshot(self, record: dict) -> str:
        """Put the ack set into a fresh object and make ``record`` name it."""
        gen = self._snapshot_gen + 1
        snapshot = snapshot_name(self.stream_id, self.name, gen)
        body = json.dumps(record["acks"], separators=(",", ":")).encode()
        await storage_metrics.put_object(self.objects, snapshot, body, "cursor_snapshot")
        record.update(acks={"below": self.acks.acked_below, "ranges": []}, snapshot=snapshot, gen=gen)
        return snapshot

    async def _write_record(self, record: dict, snapshot: str | None) -> None:
        """CAS the record on the version last seen; on a lost race, fence this copy."""
        value = json.dumps(record, separators=(",", ":")).encode()
        expected = EXPECT_ABSENT if self._version_id is None else self._version_id
        try:
            res = await self.meta.put(cursor_key(self.stream_id, self.name), value, expected_version_id=expected,
                                      partition_key=stream_partition(self.stream_id))
        except UnexpectedVersion as exc:
            if snapshot is not None:
                await self.objects.delete(snapshot)  # our record lost: nothing names it
            self._fence(str(exc))
        self._version_id = res.version.version_id

    @property
    def version_id(self) -> int | None:
        """Version of the record as this copy last read or wrote it (None: absent)."""
        return self._version_id

    async def verify(self) -> bool:
        """False, and this copy fenced for good, if someone else wrote or deleted the
        durable record since this copy last read or wrote it.

        Waits for this copy's own write in flight, whose new version is not someone else's.
        """
        if not self.durable or self.fenced:
            return not self.fenced
        async with self._lock:
            rec = await self.meta.get(cursor_key(self.stream_id, self.name),
                                      partition_key=stream_partition(self.stream_id))
            found = rec.version.version_id if rec is not None else None
            if found == self._version_id:
                return True
            try:
                self._fence(f"version {found}, not {self._version_id}")
            except CursorFenced:
                pass
            return False

    def _fence(self, why: str) -> None:
        self.fenced = True
        error = CursorFenced(f"cursor {self.name!r} of stream {self.stream_id} was written by another owner ({why})")
        if self.on_fenced is not None:
            self.on_fenced(error)
        raise error

    def _check_not_fenced(self) -> None:
        if self.fenced:
            raise CursorFenced(f"cursor {self.name!r} of stream {self.stream_id} is fenced; reload it")

    async def delete(self) -> None:
        """Drop the durable cursor (whatever its current version) and its snapshot object."""
        if self.durable:
            key, partition = cursor_key(self.stream_id, self.name), stream_partition(self.stream_id)

            async def delete_current() -> None:
                rec = await self.meta.get(key, partition_key=partition)
                if rec is None:
                    return
                # conditional, so that the snapshot deleted below is the one the record named
                await self.meta.delete(key, expected_version_id=rec.version.version_id, partition_key=partition)
                snapshot = json.loads(rec.value).get("snapshot")
                if snapshot is not None and self.objects is not None:
                    await self.objects.delete(snapshot)

            await cas.retry(delete_current)
        self.durable = False


def snapshot_name(stream_id: int, name: str, gen: int, unique: str | None = None) -> str:
    """A fresh object name for generation ``gen`` of a cursor's snapshot (never reused)."""
    unique = unique or uuid.uuid4().hex
    return f"cursors/{stream_id:020d}/{quote(name, safe='')}/{gen:010d}-{unique}"


async def list_cursors(meta: MetadataStore, stream_id: int) -> list[str]:
    """Names of the durable cursors of a stream."""
    prefix = f"{stream_partition(stream_id)}/cursor/"
    return [unquote(k[len(prefix):]) async for k in
            meta.list(prefix, prefix + "\U0010ffff", partition_key=stream_partition(stream_id))]


__all__ = ["Cursor", "CursorFenced", "cursor_key", "list_cursors", "snapshot_name", "stream_partition"]
