"""One shard's data in LMDB, driven only by that shard's thread.

LMDB was chosen by measurement (bench/RESULTS.md, "Metadata storage library"): it
sorts keys by memcmp (so ``keys.encode_key`` yields Oxia order), needs a third of
SQLite's CPU per conditional insert and is ~5x faster on ceiling lookups. The map
(address space, not memory) starts at ``map_size`` and doubles when full. Data lives in
the OS page cache, not the heap, so millions of keys need no process memory.
Keys are limited to ``MAX_ENCODED_KEY`` bytes by LMDB's 511-byte key limit.

Sub-databases of the environment:
  kv        encoded key -> HDR + client identity + value
  eph       session id (8 bytes) + encoded key -> b""  (ephemeral records by session)
  sessions  session id -> timeout ms (8 bytes) + client identity
  meta      b"last_version_id" -> 8 bytes

``execute`` applies a batch of operations in ONE write transaction and commits it
(fsync'd when durable) before returning; every operation gets its own result or
error, so a failed CAS does not affect its neighbours.
"""

from __future__ import annotations

import logging
import struct
from typing import Any, Callable

import lmdb

from ..api import Comparison, Notification, NotificationType, PutResult, Record, Version
from ..errors import InvalidRequest, MetadataError, SessionNotFound, UnexpectedVersion
from ..keys import decode_key, encode_key

log = logging.getLogger(__name__)

# Opcodes; an operation is a tuple (opcode, future_or_None, *args).
PUT, DELETE, DELETE_RANGE, GET, LIST, CREATE_SESSION, CLOSE_SESSION = range(7)

#: LMDB's key limit is 511 bytes; eph keys add an 8-byte session id prefix.
MAX_ENCODED_KEY = 500
_MAX_SEQ = 2**64 - 1

# version id, modifications count, created ms, modified ms, session id (0 = none),
# length of the client identity that follows.
HDR = struct.Struct(">QQqqQH")
_U64 = struct.Struct(">Q")
_LAST_VID = b"last_version_id"
_CREATED, _MODIFIED = NotificationType.KEY_CREATED, NotificationType.KEY_MODIFIED


def _record(ekey: bytes, raw: bytes, include_value: bool) -> Record:
    vid, mods, ctime, mtime, sid, ilen = HDR.unpack_from(raw)
    ident = raw[HDR.size : HDR.size + ilen].decode() if ilen else None
    value = raw[HDR.size + ilen :] if include_value else None
    return Record(decode_key(ekey), value, Version(vid, mods, ctime, mtime, sid or None, ident))


class ShardStore:
    """Synchronous LMDB storage of one shard (not thread-safe: one thread only)."""

    def __init__(self, path: str, *, durable: bool, map_size: int, now_ms: Callable[[], int]):
        self.env = lmdb.open(
            path, map_size=map_size, max_dbs=4, sync=durable, metasync=durable,
            readahead=False, meminit=False,  # random access: do not page in neighbours
        )
        self.kv = self.env.open_db(b"kv")
        self.eph = self.env.open_db(b"eph")
        self.sess = self.env.open_db(b"sessions")
        self.meta = self.env.open_db(b"meta")
        self.now_ms = now_ms
        self.commits = 0  # write transactions committed (tests check group commit)
        with self.env.begin() as txn:
            raw = txn.get(_LAST_VID, db=self.meta)
        self.vid = _U64.unpack(raw)[0] if raw else 0
        self._handlers: dict[int, Callable[..., Any]] = {
            PUT: self._put, DELETE: self._delete, DELETE_RANGE: self._delete_range,
            GET: self._get, LIST: self._list,
            CREATE_SESSION: self._create_session, CLOSE_SESSION: self._close_session,
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
    def _put(self, txn, now, notes, effects, key, ekey, value, expected, sid, ident, deltas):
        if deltas:
            key = self._sequence_key(txn, key, deltas)
            ekey = encode_key(key)
            if len(ekey) > MAX_ENCODED_KEY:
                raise InvalidRequest("sequence key too long")
        if sid and txn.get(_U64.pack(sid), db=self.sess) is None:
            raise SessionNotFound(f"session {sid} does not exist")
        if expected == -1:
            # Must-not-exist create: one LMDB call (each call hands the GIL around).
            identb = ident.encode() if sid else b""
            vid = self.vid + 1
            rec = HDR.pack(vid, 0, now, now, sid or 0, len(identb)) + identb + value
            if not txn.put(ekey, rec, db=self.kv, overwrite=False):
                raise UnexpectedVersion(f"{key!r} already exists")
            self.vid = vid
            if sid:
                txn.put(_U64.pack(sid) + ekey, b"", db=self.eph)
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
        self.vid += 1
        vid = self.vid
        identb = ident.encode() if sid else b""
        txn.put(ekey, HDR.pack(vid, mods, ctime, now, sid or 0, len(identb)) + identb + value, db=self.kv)
        if sid and osid != sid:
            txn.put(_U64.pack(sid) + ekey, b"", db=self.eph)
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
            sid = HDR.unpack_from(cur.value())[4]
            if sid:
                txn.delete(_U64.pack(sid) + k, db=self.eph)
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
            txn.delete(k[8:], db=self.kv)
            if notes is not None:
                notes.append(Notification(NotificationType.KEY_DELETED, decode_key(k[8:])))
            cur.delete()
            deleted += 1
        txn.delete(sk, db=self.sess)
        effects.append(("close", sid))
        return deleted
