"""Oxia's key order and shard routing, shared by every metadata backend.

Key order ("slash spans"): keys are compared segment by segment, splitting on
``/``. While both keys still contain a ``/``, the segments before it are compared
bytewise; when only one of them has a ``/`` left, the one without sorts first; when
neither has, the rests are compared bytewise. So every direct child of ``/a/`` sorts
before any grandchild: ``/a/z`` < ``/a/b/c``.

``encode_key`` maps a key to bytes whose plain memcmp order is exactly that order,
so an ordinary ordered byte store (LMDB, SQLite BLOBs) gives Oxia order for free:
each non-final segment becomes ``\\x01 seg \\x00`` and the final segment
``\\x00 seg``. Keys containing NUL cannot be encoded and are rejected.

Routing: Oxia hashes the key (or the partition key) with xxh3-64, keeps the low 32
bits, and assigns each shard a contiguous inclusive range of that uint32 space.
"""

from __future__ import annotations

import xxhash

from .errors import InvalidRequest

_U32 = 0xFFFFFFFF
#: The longest encoded key every backend accepts: the embedded engine's (LMDB's key limit
#: is 511 bytes; its ephemeral-record keys add an 8-byte session id prefix).
MAX_ENCODED_KEY = 500


def validate_key(key: object) -> str:
    if not isinstance(key, str):
        raise InvalidRequest(f"key must be a str, not {type(key).__name__}")
    if "\x00" in key:
        raise InvalidRequest("key must not contain NUL characters")
    return key


def encode_key(key: str) -> bytes:
    """Order-preserving byte encoding of a (valid) key."""
    raw = key.encode("utf-8")
    head, sep, last = raw.rpartition(b"/")
    if not sep:
        return b"\x00" + raw
    # Segments of ``head`` are joined by "\x00\x01": "\x01 s0 \x00 \x01 s1 \x00 ... \x00 last"
    return b"\x01" + head.replace(b"/", b"\x00\x01") + b"\x00\x00" + last


def key_after(key: str) -> str:
    """The smallest key of ``key``'s depth that sorts after it: where a listing resumes past ``key``.

    No key holds NUL, so nothing of that depth lies between ``key`` and ``key + "\\x01"``.
    """
    return key + "\x01"


def index_key(name: str, secondary_key: str) -> bytes:
    """The encoded key of a secondary index entry (the embedded engine's ``idx`` key; its value
    is the primary key): checked against ``MAX_ENCODED_KEY`` by every backend."""
    return name.encode() + b"\x00" + encode_key(secondary_key)


def decode_key(data: bytes) -> str:
    """Inverse of ``encode_key``."""
    if data[:1] == b"\x00":
        return data[1:].decode("utf-8")
    # The final segment has no NUL and the encoded head never contains "\x00\x00",
    # so the last "\x00\x00" separates head from final segment.
    head, _, last = data[1:].rpartition(b"\x00\x00")
    return (head.replace(b"\x00\x01", b"/") + b"/" + last).decode("utf-8")


def compare_keys(a: str, b: str) -> int:
    """Oxia's comparison, written the direct way (reference for tests): -1, 0 or 1."""
    x, y = a.encode("utf-8"), b.encode("utf-8")
    while x and y:
        ia, ib = x.find(b"/"), y.find(b"/")
        if ia < 0 and ib < 0:
            break
        if ia < 0:
            return -1
        if ib < 0:
            return 1
        sa, sb = x[:ia], y[:ib]
        if sa != sb:
            return -1 if sa < sb else 1
        x, y = x[ia + 1 :], y[ib + 1 :]
    return (x > y) - (x < y)


def key_hash(key: str) -> int:
    """Oxia's routing hash: low 32 bits of xxh3-64 of the UTF-8 key."""
    return xxhash.xxh3_64_intdigest(key.encode("utf-8")) & _U32


def hash_ranges(shards: int) -> list[tuple[int, int]]:
    """Inclusive uint32 hash range of each shard, split as Oxia's coordinator does."""
    if shards < 1:
        raise ValueError("a namespace needs at least one shard")
    bucket = _U32 // shards + 1
    ranges = []
    for i in range(shards):
        lo = i * bucket
        hi = _U32 if i == shards - 1 else lo + bucket - 1
        ranges.append((lo, hi))
    return ranges


def shard_index(routing_key: str, shards: int) -> int:
    """Index of the shard (0-based, in hash-range order) owning ``routing_key``."""
    return min(key_hash(routing_key) // (_U32 // shards + 1), shards - 1)
