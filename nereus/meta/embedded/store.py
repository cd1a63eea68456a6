"""One shard's data in LMDB, driven only by that shard's thread.

LMDB was chosen by measurement (bench/RESULTS.md, "Metadata storage library"): it
sorts keys by memcmp (so ``keys.encode_key`` yields Oxia order), needs a third of
SQLite's CPU per conditional insert and is ~5x faster on ceiling lookups. The map
(address space, not memory) starts at ``map_size`` and doubles when full. Data lives in
the OS page cache, not the heap, so millions of keys need no process memory.
Keys are limited to ``MAX_ENCODED_KEY`` bytes by LMDB's 511-byte key limit.

Sub-databases of the environment:
  kv        encoded key -> HDR + client identity + [index entries] + value
  eph       session id (8 bytes) + encoded key -> b""  (ephemeral records by session)
  sessions  session id -> timeout ms (8 bytes) + client identity
  meta      b"last_version_id" -> 8 bytes
  idx       index name + NUL + encoded secondary key -> encoded primary keys (sorted
            duplicates): Oxia's secondary indexes, ordered by secondary key, then by
            primary key

A record's index entries are kept inside the record too (flagged in HDR), so that
replacing or deleting it removes exactly its old entries, in the same transaction
as the record itself: index and records are never out of step, even after a crash.

``execute`` applies a batch of operations in ONE write transaction and commits it
(fsync'd when durable) before returning; every operation gets its own result or
error, so a failed CAS does not affect its neighbours. ``read`` answers a point read
from the last committed transaction, in any thread (LMDB readers never wait for the
writer); ``env_guard`` keeps those readers out while the map is resized.
"""

from __future__ import annotations

import contextlib
import logging
import struct
from typing import Any, Callable, ContextManager

import lmdb

from ..api import Comparison, Notification, NotificationType, PutResult, Record, Version
from ..errors import InvalidRequest, MetadataError, SessionNotFound, UnexpectedVersion
from ..keys import MAX_ENCODED_KEY, decode_key, encode_key

log = logging.getLogger(__name__)

# Opcodes; an operation is a tuple (opcode, future_or_None, *args).
PUT, DELETE, DELETE_RANGE, GET, LIST, CREATE_SESSION, CLOSE_SESSION, GET_INDEX, LIST_INDEX = range(9)
#: Point reads: answered by ``read`` from committed state, outside the shard's queue.
POINT_READS = frozenset((GET, GET_INDEX))

_MAX_SEQ = 2**64 - 1

# version id, modifications count, created ms, modified ms, session id (0 = none),
# flags + length of the client identity that follows.
HDR = struct.Struct(">QQqqQH")
_HAS_INDEXES = 0x8000  # in HDR's last field: index entries follow the identity
MAX_IDENTITY = 0x7FFF  # bytes of client identity the rest of that field can count
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_LAST_VID = b"last_version_id"
_CREATED, _MODIFIED = NotificationType.KEY_CREATED, NotificationType.KEY_MODIFIED


def _record(ekey: bytes, raw: bytes, include_value: bool) -> Record:
    vid, mods, ctime, mtime, sid, flags = HDR.unpack_from(raw)
    ilen = flags & MAX_IDENTITY
    ident = raw[HDR.size : HDR.size + ilen].decode() if ilen else None
    value = None
    if include_value:
        off = HDR.size + ilen
        if flags & _HAS_INDEXES:
            off += 2 + _U16.unpack_from(raw, off)[0]
        value = raw[off:]
    return Record(decode_key(ekey), value, Version(vid, mods, ctime, mtime, sid or None, ident))


def _pack_record(vid: int, mods: int, ctime: int, mtime: int, sid: int, identb: bytes,
                 indexes: tuple, value: bytes) -> bytes:
    if not indexes:
        return HDR.pack(vid, mods, ctime, mtime, sid, len(identb)) + identb + value
    blob = b"".join(_U16.pack(len(ik)) + ik for ik in indexes)
    return (HDR.pack(vid, mods, ctime, mtime, sid, len(identb) | _HAS_INDEXES) + identb
            + _U16.pack(len(blob)) + blob + value)


def _index_keys(raw: bytes) -> list[bytes]:
    """The idx keys a stored record holds entries under (none for most records)."""
    flags = HDR.unpack_from(raw)[5]
    if not flags & _HAS_INDEXES:
        return []
    off = HDR.size + (flags & MAX_IDENTITY)
    end = off + 2 + _U16.unpack_from(raw, off)[0]
    off += 2
    out = []
    while off < end:
        n = _U16.unpack_from(raw, off)[0]
        out.append(raw[off + 2 : off + 2 + n])
        off += 2 + n
    return out


class ShardStore:
    """Synchronous LMDB storage of one shard: one thread writes; ``read`` may be called from any."""

    def __init__(self, path: str, *, durable: bool, map_size: int, now_ms: Callable[[], int],
                 env_guard: ContextManager | None = None):
        self.env = lmdb.open(
            path, map_size=map_size, max_dbs=5, sync=durable, metasync=durable,
            readahead=False, meminit=False,  # random access: do not page in neighbours
        )
        self.kv = self.env.open_db(b"kv")
        self.eph = self.env.open_db(b"eph")
        self.sess = self.env.open_db(b"sessions")
        self.meta = self.env.open_db(b"meta")
        self.idx = self.env.open_db(b"idx", dupsort=True)
        self.now_ms = now_ms
        # LMDB may resize its map only while no transaction of the process is open.
        self._env_guard = env_guard if env_guard is not None else contextlib.nullcontext()
        self.commits = 0  # write transactions committed (tests check group commit)
        with self.env.begin() as txn:
            raw = txn.get(_LAST_VID, db=self.meta)
        self.vid = _U64.unpack(raw)[0] if raw else 0
        self._handlers: dict[int, Callable[..., Any]] = {
            PUT: self._put, DELETE: self._delete, DELETE_RANGE: self._delete_range,
            GET: self._get, LIST: self._list,
            CREATE_SESSION: self._create_session, CLOSE_SESSION: self._close_session,
            GET_INDEX: self._get_index, LIST_INDEX: self._list_index,
        }

    def sessions(self) -> list[tuple[int, int, str]]:
        """Persisted sessions as (session id, timeout ms, client identity)."""
        with self.env.begin() as txn:
            return [
                (_U64.unpack(k)[0], _U64.unpack_from(v)[0], v[8:].decode())
                for k, v in txn.cursor(db=self.sess)
            ]

    def close(self) -> None:
        self.env.close()

    def read(self, opcode: int, args: tuple) -> Any:
        """A point read (``POINT_READS``) of the last committed state; the caller holds ``env_guard``."""
        with self.env.begin() as txn:
            return self._handlers[opcode](txn, 0, None, None, *args)

    # ---------------------------------------------------------------- batches
    def execute(self, ops: list[tuple], notes: list | None) -> tuple[list, list]:
        """Apply ``ops`` in one transaction, commit, return per-op results.

        Returns ``(results, session_effects)``; results are ``(fut, value, error)``.
        Notifications are appended to ``notes`` (None: nobody listens).
        """
        while True:
            start_vid, start_notes = self.vid, len(notes) if notes is not None else 0
            try:
                return self._execute(ops, notes)
            except lmdb.MapFullError:
                self.vid = start_vid
                if notes is not None:
                    del notes[start_notes:]
                size = self.env.info()["map_size"] * 2
                log.info("growing LMDB map of %s to %d bytes", self.env.path(), size)
                with self._env_guard:
                    self.env.set_mapsize(size)
            except BaseException:
                self.vid = start_vid
                raise

    def _execute(self, ops: list[tuple], notes: list | None) -> tuple[list, list]:
        results: list[tuple] = []
        effects: list[tuple] = []
        now = self.now_ms()
        start_vid = self.vid
        txn = self.env.begin(write=True)
        try:
            handlers = self._handlers
            for op in ops:
                try:
                    res = handlers[op[0]](txn, now, notes, effects, *op[2:])
                    results.append((op[1], res, None))
                except MetadataError as e:
                    results.append((op[1], None, e))
            if self.vid != start_vid:
                txn.put(_LAST_VID, _U64.pack(self.vid), db=self.meta)
            txn.commit()  # LMDB skips the sync when the transaction changed nothing
        except BaseException:
            txn.abort()
            raise
        self.commits += 1
        return results, effects

    # ------------------------------------------------------------ operations
    def _put(self, txn, now, notes, effects, key, ekey, value, expected, sid, ident, deltas, indexes=()):
        """``indexes``: the idx keys (``keys.index_key``) of the record's index entries."""
        if deltas:
            key = self._sequence_key(txn, key, deltas)
            ekey = encode_key(key)
            if len(ekey) > MAX_ENCODED_KEY:
                raise InvalidRequest(f"sequence key too long ({len(ekey)} encoded bytes, the limit is "
                                     f"{MAX_ENCODED_KEY})")
        if sid and txn.get(_U64.pack(sid), db=self.sess) is None:
            raise SessionNotFound(f"session {sid} does not exist")
        identb = ident.encode() if sid else b""
        if len(identb) > MAX_IDENTITY:
            raise InvalidRequest(f"client identity too long ({len(identb)} bytes > {MAX_IDENTITY})")
        if expected == -1:
            # Must-not-exist create: one LMDB call (each call hands the GIL around).
            vid = self.vid + 1
            rec = _pack_record(vid, 0, now, now, sid or 0, identb, indexes, value)
            if not txn.put(ekey, rec, db=self.kv, overwrite=False):
                raise UnexpectedVersion(f"{key!r} already exists")
            self.vid = vid
            if sid:
                txn.put(_U64.pack(sid) + ekey, b"", db=self.eph)
            for ik in indexes:
                txn.put(ik, ekey, db=self.idx)
            if notes is not None:
                notes.append(Notification(_CREATED, key, vid))
            return PutResult(key, Version(vid, 0, now, now, sid or None, ident if sid else None))
        old = txn.get(ekey, db=self.kv)
        if old is None:
            if expected is not None and expected != -1:
                raise UnexpectedVersion(f"{key!r} does not exist (expected version {expected})")
            mods, ctime, osid = 0, now, 0
        else:
            ovid, omods, ctime, _, osid, _ = HDR.unpack_from(old)
            if expected is not None and expected != ovid:
                raise UnexpectedVersion(f"{key!r} is at version {ovid}, expected {expected}")
            mods = omods + 1
            if osid and osid != sid:
                txn.delete(_U64.pack(osid) + ekey, db=self.eph)
            for ik in _index_keys(old):  # the new version's entries replace the old ones
                txn.delete(ik, ekey, db=self.idx)
        self.vid += 1
        vid = self.vid
        txn.put(ekey, _pack_record(vid, mods, ctime, now, sid or 0, identb, indexes, value), db=self.kv)
        if sid and osid != sid:
            txn.put(_U64.pack(sid) + ekey, b"", db=self.eph)
        for ik in indexes:
            txn.put(ik, ekey, db=self.idx)
        if notes is not None:
            notes.append(Notification(_CREATED if old is None else _MODIFIED, key, vid))
        return PutResult(key, Version(vid, mods, ctime, now, sid or None, ident if sid else None))

    def _sequence_key(self, txn, prefix: str, deltas) -> str:
        # As Oxia: find the highest key below "<prefix>-<max uint64>" on this shard; if
        # it extends the prefix, its "-"-separated parts are the current sequence.
        cur = txn.cursor(db=self.kv)
        bound = encode_key(f"{prefix}-{_MAX_SEQ:020d}")
        ok = cur.prev() if cur.set_range(bound) else cur.last()
        parts: list[str] = []
        if ok:
            last = decode_key(cur.key())
            if last.startswith(prefix + "-"):
                parts = last[len(prefix) :].split("-")[1:]
        if len(parts) > len(deltas):
            raise InvalidRequest(f"sequence under {prefix!r} has {len(parts)} parts, got {len(deltas)} deltas")
        key = prefix
        for i, delta in enumerate(deltas):
            try:
                base = int(parts[i]) if i < len(parts) else 0
            except ValueError:
                raise InvalidRequest(f"malformed sequence key under {prefix!r}") from None
            if base + delta > _MAX_SEQ:
                raise InvalidRequest("sequence overflow")
            key = f"{key}-{base + delta:020d}"
        return key

    def _delete(self, txn, now, notes, effects, key, ekey, expected):
        old = txn.get(ekey, db=self.kv)
        if old is None:
            if expected is not None and expected != -1:
                raise UnexpectedVersion(f"{key!r} does not exist (expected version {expected})")
            return False
        ovid, _, _, _, osid, _ = HDR.unpack_from(old)
        if expected is not None and expected != ovid:
            raise UnexpectedVersion(f"{key!r} is at version {ovid}, expected {expected}")
        txn.delete(ekey, db=self.kv)
        if osid:
            txn.delete(_U64.pack(osid) + ekey, db=self.eph)
        for ik in _index_keys(old):
            txn.delete(ik, ekey, db=self.idx)
        if notes is not None:
            notes.append(Notification(NotificationType.KEY_DELETED, key))
        return True

    def _delete_range(self, txn, now, notes, effects, lo, hi, elo, ehi):
        cur = txn.cursor(db=self.kv)
        cur.set_range(elo)
        count = 0
        while True:
            k = cur.key()  # b"" once the cursor ran off the end (no key is empty)
            if not k or k >= ehi:
                break
            raw = cur.value()
            sid = HDR.unpack_from(raw)[4]
            if sid:
                txn.delete(_U64.pack(sid) + k, db=self.eph)
            for ik in _index_keys(raw):
                txn.delete(ik, k, db=self.idx)
            cur.delete()  # moves to the next record
            count += 1
        if notes is not None:
            notes.append(Notification(NotificationType.KEY_RANGE_DELETED, lo, key_range_end=hi))
        return count

    def _get(self, txn, now, notes, effects, ekey, comparison, include_value):
        if comparison is Comparison.EQUAL:
            raw = txn.get(ekey, db=self.kv)
            return None if raw is None else _record(ekey, raw, include_value)
        cur = txn.cursor(db=self.kv)
        ok = cur.set_range(ekey)  # lowest key >= ekey
        if comparison is Comparison.CEILING:
            pass
        elif comparison is Comparison.HIGHER:
            if ok and cur.key() == ekey:
                ok = cur.next()
        elif ok:  # FLOOR / LOWER, positioned at the lowest key >= ekey
            if comparison is Comparison.LOWER or cur.key() != ekey:
                ok = cur.prev()
        else:  # every key is < ekey
            ok = cur.last()
        return _record(cur.key(), cur.value(), include_value) if ok else None

    def _list(self, txn, now, notes, effects, elo, ehi, limit, with_values):
        """Up to ``limit`` (encoded key, key or Record) pairs of [elo, ehi)."""
        cur = txn.cursor(db=self.kv)
        out: list[tuple[bytes, Any]] = []
        ok = cur.set_range(elo)
        while ok and len(out) < limit:
            k = cur.key()
            if k >= ehi:
                break
            out.append((k, _record(k, cur.value(), True) if with_values else decode_key(k)))
            ok = cur.next()
        return out

    def _get_index(self, txn, now, notes, effects, name, esec, comparison, include_value):
        """The record an index entry of ``name`` points to, chosen as Oxia does.

        Entries sort by secondary key, then primary key. EQUAL, CEILING, HIGHER and a
        FLOOR that matches exactly take the first entry of their secondary key; LOWER
        and an inexact FLOOR take the last entry of the nearest lower one. Returns
        ``(record, secondary key)`` or None.
        """
        prefix = name.encode() + b"\x00"
        target = prefix + esec
        cur = txn.cursor(db=self.idx)
        ok = cur.set_range(target)  # first entry of the lowest secondary key >= target
        exact = ok and cur.key() == target
        if comparison is Comparison.EQUAL:
            ok = exact
        elif comparison is Comparison.HIGHER:
            if exact:
                ok = cur.next_nodup()
        elif comparison is Comparison.LOWER or (comparison is Comparison.FLOOR and not exact):
            ok = cur.prev() if ok else cur.last()  # last entry of the previous secondary key
        if not ok or not cur.key().startswith(prefix):
            return None
        ikey, ekey = cur.key(), cur.value()
        raw = txn.get(ekey, db=self.kv)
        if raw is None:  # cannot happen: entries change with their record
            log.error("index %r points to a missing record %r", name, decode_key(ekey))
            return None
        return _record(ekey, raw, include_value), decode_key(ikey[len(prefix):])

    def _list_index(self, txn, now, notes, effects, name, elo, ehi, after, limit, with_values):
        """Up to ``limit`` entries of index ``name`` with secondary keys in [elo, ehi), in
        index order, after the entry ``after`` ((idx key, primary key) or None).

        Returns ``(idx key, encoded primary key, secondary key, key or Record)`` tuples.
        """
        prefix = name.encode() + b"\x00"
        hi = prefix + ehi
        cur = txn.cursor(db=self.idx)
        if after is None:
            ok = cur.set_range(prefix + elo)
        else:
            ik, ek = after
            ok = cur.set_range_dup(ik, ek)  # the first entry of ik at or after ek
            if ok and cur.value() == ek:
                ok = cur.next()
            elif not ok:
                ok = cur.set_range(ik)
                if ok and cur.key() == ik:
                    ok = cur.next_nodup()
        out: list[tuple] = []
        while ok and len(out) < limit:
            k = cur.key()
            if k >= hi:
                break
            ekey = cur.value()
            if with_values:
                raw = txn.get(ekey, db=self.kv)
                item = _record(ekey, raw, True) if raw is not None else None
            else:
                item = decode_key(ekey)
            if item is not None:
                out.append((k, ekey, decode_key(k[len(prefix):]), item))
            ok = cur.next()
        return out

    def _create_session(self, txn, now, notes, effects, timeout_ms, ident):
        self.vid += 1
        sid = self.vid
        txn.put(_U64.pack(sid), _U64.pack(timeout_ms) + ident.encode(), db=self.sess)
        effects.append(("open", sid, timeout_ms, ident))
        return sid

    def _close_session(self, txn, now, notes, effects, sid):
        sk = _U64.pack(sid)
        if txn.get(sk, db=self.sess) is None:
            raise SessionNotFound(f"session {sid} does not exist")
        cur = txn.cursor(db=self.eph)
        cur.set_range(sk)
        deleted = 0
        while True:
            k = cur.key()
            if k[:8] != sk:
                break
            raw = txn.pop(k[8:], db=self.kv)
            for ik in _index_keys(raw) if raw is not None else ():
                txn.delete(ik, k[8:], db=self.idx)
            if notes is not None:
                notes.append(Notification(NotificationType.KEY_DELETED, decode_key(k[8:])))
            cur.delete()
            deleted += 1
        txn.delete(sk, db=self.sess)
        effects.append(("close", sid))
        return deleted
