"""Metadata records of StreamStorage: their keys and their (JSON) values.

Per stream ``s`` (all under partition key ``/nereus/s/{s:020d}``, so on one shard):

    meta           {name, created}                       immutable description
    session        {token, owner, since}                 current append session
    tail           {next, size, token, pending}          next offset, cumulative size,
                                                         fencing token, slices not in idx yet
    start          {start}                               first readable offset (trim)
    idx/{last:020d} {slices: [IndexEntry...]}            offset index: a group of contiguous
                                                         slices, keyed by its last offset
                    {slices: [compacted], replaced: [...]}  after compaction (generation > 0)
    compaction     {owner, since}                        the compactor's lease (ephemeral record)

The CAS on ``tail`` is the commit point of a slice: the slice joins ``tail.pending``.
When ``pending`` holds a full group, the group is written as one ``idx`` key and the
next commit starts a new group, so a commit costs one metadata write plus a
fraction of one. The offset index is the ``idx`` groups plus ``tail.pending``.

Objects: ``/nereus/objects/{key}`` holds the reference count of one object; a
``/nereus/gc/pending/{key}`` marker exists while an object's slices are being
committed (so a crash leaves a metadata trace), ``/nereus/gc/free/{key}`` once no
index entry refers to it. ``/nereus/gc/pins/{key}/{holder}`` pins an object (a table
that lists it as a data file, a job reading it): it is not deleted while pinned.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

STREAMS_ROOT = "/nereus/streams"
NEXT_STREAM_ID_KEY = f"{STREAMS_ROOT}/next-id"
OBJECTS_ROOT = "/nereus/objects"
GC_PENDING_ROOT = "/nereus/gc/pending"
GC_FREE_ROOT = "/nereus/gc/free"
GC_PINS_ROOT = "/nereus/gc/pins"
WAL_REPLICAS_ROOT = "/nereus/wal/replicas"  # where each WAL replica's service listens
OFFSET_WIDTH = 20


def encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def decode(data: bytes | None) -> dict[str, Any]:
    return json.loads(data) if data else {}


def subtree_ranges(prefix: str) -> list[tuple[str, str]]:
    """Two key ranges that together cover every key strictly below ``prefix``.

    Keys sort in Oxia's hierarchical order: where two keys differ, the one with
    fewer '/' left sorts first. So the direct children of ``prefix`` form one range
    and every deeper key another.
    """
    top = "\U0010ffff"
    return [(f"{prefix}/", f"{prefix}/{top}"), (f"{prefix}/\x01/", f"{prefix}/{top}/{top}")]


def name_key(name: str) -> str:
    """Key mapping a stream name (which may contain '/') to its id."""
    return f"{STREAMS_ROOT}/by-name/{quote(name, safe='')}"


def names_range(prefix: str = "") -> tuple[str, str]:
    """Key range of the streams whose names start with ``prefix``.

    ``quote`` works character by character, so a name's prefix quotes to a prefix of
    its key: one namespace's streams are one range, listed without reading the others.
    """
    lo = name_key(prefix)
    return lo, lo + "\U0010ffff"


def name_from_key(key: str) -> str:
    return unquote(key.rsplit("/", 1)[1])


def stream_partition(stream_id: int) -> str:
    return f"/nereus/s/{stream_id:0{OFFSET_WIDTH}d}"


def meta_key(stream_id: int) -> str:
    return f"{stream_partition(stream_id)}/meta"


def session_key(stream_id: int) -> str:
    return f"{stream_partition(stream_id)}/session"


def tail_key(stream_id: int) -> str:
    return f"{stream_partition(stream_id)}/tail"


def start_key(stream_id: int) -> str:
    return f"{stream_partition(stream_id)}/start"


def index_key(stream_id: int, last_offset: int) -> str:
    return f"{stream_partition(stream_id)}/idx/{last_offset:0{OFFSET_WIDTH}d}"


def index_range(stream_id: int, first: int = 0, last: int = 10**OFFSET_WIDTH - 1) -> tuple[str, str]:
    """Key range of the index entries whose last offset is in ``[first, last]``."""
    return index_key(stream_id, first), index_key(stream_id, last) + "\x01"


def object_key(key: str) -> str:
    return f"{OBJECTS_ROOT}/{quote(key, safe='')}"


def gc_pending_key(key: str) -> str:
    return f"{GC_PENDING_ROOT}/{quote(key, safe='')}"


def gc_free_key(key: str) -> str:
    return f"{GC_FREE_ROOT}/{quote(key, safe='')}"


def wal_replica_key(replica_id: str) -> str:
    return f"{WAL_REPLICAS_ROOT}/{quote(replica_id, safe='')}"


def object_from_marker(marker_key: str) -> str:
    return unquote(marker_key.rsplit("/", 1)[1])


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """Where the records ``[base, base + records)`` of a stream are stored."""

    object: str  # object key
    position: int  # byte offset of the slice in the object
    length: int  # byte length of the slice
    base: int  # offset of the first record
    records: int  # number of records in the slice
    entries: int  # number of entries (appends) in the slice
    size: int  # cumulative stream size in bytes at the end of this slice
    generation: int = 0  # 0 for WAL slices; compaction writes higher generations
    timestamp: int = 0  # commit time, ms since the epoch (time-based retention)
    # The lower-generation slices a compacted entry replaced: what a reader falls back
    # to if the compacted object is missing (kept in the idx value, not in this JSON).
    fallback: tuple["IndexEntry", ...] = ()
    # Cumulative stream size before the first record, kept by an entry that merged compacted
    # entries (their own fallbacks are not kept, so the replaced entries cannot tell it).
    before: int | None = None

    @property
    def last(self) -> int:
        return self.base + self.records - 1

    def to_json(self) -> dict[str, Any]:
        # Built by hand: dataclasses.asdict deep-copies and costs ~100 us per call.
        out = {"object": self.object, "position": self.position, "length": self.length, "base": self.base,
               "records": self.records, "entries": self.entries, "size": self.size,
               "generation": self.generation, "timestamp": self.timestamp}
        if self.before is not None:
            out["before"] = self.before
        return out

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "IndexEntry":
        try:
            return cls(**value)
        except TypeError:  # a field a later version added: skipped, as every record's unknown fields are
            return cls(**{k: v for k, v in value.items() if k in _ENTRY_FIELDS})

    @property
    def compacted(self) -> bool:
        return self.generation > 0

    @property
    def size_before(self) -> int:
        """Cumulative stream size before this entry's first record (a compacted
        object's own length differs from the stream bytes it holds)."""
        if self.before is not None:
            return self.before
        if self.fallback:
            return self.fallback[0].size_before
        return self.size - self.length


def encode_entry_json(entry: IndexEntry) -> str:
    return json.dumps(entry.to_json(), separators=(",", ":"))


def encode_group(entries_json: list[str]) -> bytes:
    """An idx value: a group of contiguous slices, given as pre-encoded entries."""
    return ('{"slices":[' + ",".join(entries_json) + "]}").encode()


_ENTRY_FIELDS = frozenset(IndexEntry.__dataclass_fields__) - {"fallback"}


def decode_group(data: bytes) -> list[IndexEntry]:
    value = json.loads(data)
    replaced = value.get("replaced")
    if not replaced:
        return [IndexEntry.from_json(e) for e in value["slices"]]
    fallback = tuple(IndexEntry.from_json(e) for e in replaced)
    try:
        return [IndexEntry(**e, fallback=fallback) for e in value["slices"]]
    except TypeError:  # a field a later version added
        return [dataclasses.replace(IndexEntry.from_json(e), fallback=fallback) for e in value["slices"]]


def encode_compacted_group(entry: IndexEntry, replaced: list[IndexEntry]) -> bytes:
    """The idx value that replaces a run of groups: the compacted entry and what it replaced."""
    return json.dumps({"slices": [entry.to_json()], "replaced": [e.to_json() for e in replaced]},
                      separators=(",", ":")).encode()


def compaction_lease_key(stream_id: int) -> str:
    return f"{stream_partition(stream_id)}/compaction"


def pin_key(object_key: str, holder: str) -> str:
    """A pin: while it exists (and has not expired) the collector keeps the object."""
    return f"{GC_PINS_ROOT}/{quote(object_key, safe='')}/{quote(holder, safe='')}"


def pins_range(object_key: str) -> tuple[str, str]:
    prefix = f"{GC_PINS_ROOT}/{quote(object_key, safe='')}/"
    return prefix, prefix + "\U0010ffff"


@dataclass(frozen=True, slots=True)
class Tail:
    """The commit point of a stream: next offset, size, fencing token, and the
    slices committed since the last idx group was written (``pending``)."""

    next: int
    size: int
    token: int
    pending: tuple[IndexEntry, ...] = ()

    def encode(self, pending_json: list[str] | None = None) -> bytes:
        """``pending_json`` may carry the entries already encoded (the hot path keeps them)."""
        if pending_json is None:
            pending_json = [encode_entry_json(e) for e in self.pending]
        return (f'{{"next":{self.next},"size":{self.size},"token":{self.token},"pending":['
                + ",".join(pending_json) + "]}").encode()

    @classmethod
    def decode(cls, data: bytes | None) -> "Tail":
        value = decode(data)
        return cls(value["next"], value["size"], value["token"],
                   tuple(IndexEntry.from_json(e) for e in value.get("pending", ())))
