"""Append sessions: the fencing protocol that keeps one committer per stream.

Rules (invariants 2 and 3 of ARCHITECTURE.md):

1. Acquire bumps ``session.token`` (CAS), then stamps the new token into ``tail``
   (CAS). From that moment every CAS on ``tail`` by an older session fails,
   because it expects a version of ``tail`` that no longer exists.
2. A slice commits by a CAS on ``tail`` with the version this session last wrote,
   appending the slice to ``tail.pending``. Success is the linearization point: the
   offsets ``[next, next + records)`` belong to the slice. Any other outcome (the
   tail changed under us) means another session took over: this session is fenced
   for good and its slice never becomes visible.
3. When ``pending`` holds ``GROUP_SIZE`` slices (or its oldest is ``GROUP_MAX_AGE_MS``
   old), the next commit also writes them as
   one ``idx`` group (in the same batch, before its tail CAS) and drops them from
   ``pending`` only once that write succeeded. So every committed slice is always
   in an ``idx`` group or in ``tail.pending`` (possibly both). Acquire
   writes whatever ``pending`` a previous session left and starts an empty group.
   A stream that went quiet has its old ``pending`` slices grouped by its owner
   without a new slice (``prepare_idle_group``), so they reach compaction.
4. Any failed commit loses the session (``AppendSessionLost``): appends behind the
   failed one would otherwise commit out of order. The owner re-acquires (token + 1)
   once its callers have dealt with the failure. A tail that moved under a session
   with our own token (a collector fencing a stalled write, see ``gc``) loses it too.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..meta import EXPECT_ABSENT, MetadataStore, PutOp, UnexpectedVersion
from ..meta import cas
from . import records
from .errors import AppendSessionLost, StreamFenced
from .records import IndexEntry, Tail

log = logging.getLogger(__name__)


#: Slices per idx group: one idx write per this many commits.
GROUP_SIZE = 8
#: A group is also written once its oldest slice is this old (slow streams reach
#: the offset index, hence compaction and tables, within seconds, not hours).
GROUP_MAX_AGE_MS = 5_000


class AppendSession:
    """The writer-side state of one stream, valid while not fenced.

    A commit is split in two so the WAL writer can send every stream's commit of a
    flush in one ``put_many``: ``prepare`` gives the metadata writes (the tail CAS,
    preceded by an idx group write when a group is full), ``finish`` applies their
    results. One commit per session at a time (the writer commits flushes in order).
    """

    __slots__ = ("meta", "stream_id", "token", "next_offset", "size", "fenced", "lost", "_pending", "_tail_version",
                 "_partition", "_prepared")  # one per written loaded topic

    def __init__(self, meta: MetadataStore, stream_id: int, token: int, tail: Tail, tail_version: int):
        self.meta = meta
        self.stream_id = stream_id
        self.token = token
        self.next_offset = tail.next
        self.size = tail.size
        self.fenced = False
        self.lost: Exception | None = None
        self._pending = [(e, records.encode_entry_json(e)) for e in tail.pending]
        self._tail_version = tail_version
        self._partition = records.stream_partition(stream_id)
        self._prepared = None

    def prepare(self, object_key: str, position: int, length: int, entries: int,
                record_count: int) -> tuple[list[PutOp], IndexEntry]:
        """The writes that commit one slice, and its index entry (base offset assigned)."""
        self.check_usable()
        ops = []
        now_ms = int(time.time() * 1000)
        grouped = 0
        if len(self._pending) >= GROUP_SIZE or (self._pending and
                                                now_ms - self._pending[0][0].timestamp >= GROUP_MAX_AGE_MS):
            # The group's slices stay in tail.pending until the group write is known
            # to have succeeded (``finish``), so no outcome can lose them.
            group = self._pending[:GROUP_SIZE]
            grouped = len(group)
            ops.append(PutOp(records.index_key(self.stream_id, group[-1][0].last),
                             records.encode_group([j for _, j in group]), partition_key=self._partition))
        entry = IndexEntry(object_key, position, length, self.next_offset, record_count, entries, self.size + length,
                           timestamp=now_ms)
        entry_json = records.encode_entry_json(entry)
        tail = Tail(entry.base + record_count, entry.size, self.token)
        ops.append(PutOp(records.tail_key(self.stream_id), tail.encode([j for _, j in self._pending] + [entry_json]),
                         expected_version_id=self._tail_version, partition_key=self._partition))
        self._prepared = (entry, entry_json, grouped)
        return ops, entry

    @property
    def usable(self) -> bool:
        return not self.fenced and self.lost is None

    def check_usable(self) -> None:
        """Raise StreamFenced (or AppendSessionLost) unless this session may still commit."""
        if self.fenced:
            raise StreamFenced(f"stream {self.stream_id}: session {self.token} is fenced")
        if self.lost is not None:
            raise AppendSessionLost(f"stream {self.stream_id}: session {self.token} lost by an earlier failed "
                                    f"append ({self.lost})")

    def lose(self, exc: BaseException) -> None:
        """Make this session unusable after a failed append (see rule 4)."""
        if self.lost is None and not self.fenced:
            self.lost = exc if isinstance(exc, Exception) else AppendSessionLost(repr(exc))
            log.info("stream %d: append session %d lost: %s", self.stream_id, self.token, exc)

    async def finish(self, results: list) -> IndexEntry:
        """Apply the results of ``prepare``'s writes; raises StreamFenced if taken over.

        Any failure loses the session (rule 4).
        """
        try:
            return await self._finish(results)
        except StreamFenced:
            raise
        except Exception as exc:
            self.lose(exc)
            raise

    async def _finish(self, results: list) -> IndexEntry:
        entry, entry_json, grouped = self._prepared
        self._prepared = None
        tail_result = results[-1]
        if isinstance(tail_result, UnexpectedVersion):
            await self._tail_moved()
        if isinstance(tail_result, Exception):
            # The outcome is unknown (the write may have landed): only the tail can tell.
            if not await self._landed(entry):
                raise tail_result
        else:
            self._tail_version = tail_result.version.version_id
        if len(results) == 2 and not isinstance(results[0], Exception):
            del self._pending[:grouped]
        self._pending.append((entry, entry_json))
        self.next_offset, self.size = entry.base + entry.records, entry.size
        return entry

    async def _current_tail(self) -> Tail:
        """The tail now; marks the session fenced if another session owns it."""
        current = await self.meta.get(records.tail_key(self.stream_id), partition_key=self._partition)
        if current is None:
            self.fenced = True
            raise StreamFenced(f"stream {self.stream_id} was deleted")
        tail = Tail.decode(current.value)
        if tail.token != self.token:
            self.fenced = True
            raise StreamFenced(f"stream {self.stream_id}: taken over by a newer append session ({tail.token})")
        self._tail_version = current.version.version_id
        return tail

    async def _tail_moved(self) -> None:
        """Our tail CAS met another version: fenced, or the tail was touched under our token."""
        await self._current_tail()
        self.lose(AppendSessionLost(f"stream {self.stream_id}: the tail moved under session {self.token}"))
        self.check_usable()

    async def _landed(self, entry: IndexEntry) -> bool:
        tail = await self._current_tail()
        return bool(tail.pending) and tail.pending[-1] == entry

    @property
    def has_pending(self) -> bool:
        return bool(self._pending)

    def idle_group_due(self, now_ms: int) -> bool:
        """True if the oldest pending slice is old enough to be grouped without a new commit."""
        return (self.usable and bool(self._pending)
                and now_ms - self._pending[0][0].timestamp >= GROUP_MAX_AGE_MS)

    async def write_idle_group(self) -> None:
        """Group the pending slices of a quiet stream (at most ``GROUP_SIZE``).

        Two steps, as a commit does: the idx group first, then the tail CAS that drops
        its slices from ``pending``, so no outcome loses them. The caller serializes
        this with the session's commits.
        """
        self.check_usable()
        group = self._pending[:GROUP_SIZE]
        if not group:
            return
        await self.meta.put(records.index_key(self.stream_id, group[-1][0].last),
                            records.encode_group([j for _, j in group]), partition_key=self._partition)
        rest = self._pending[len(group):]
        tail = Tail(self.next_offset, self.size, self.token)
        try:
            result = await self.meta.put(records.tail_key(self.stream_id), tail.encode([j for _, j in rest]),
                                         expected_version_id=self._tail_version, partition_key=self._partition)
        except UnexpectedVersion:
            await self._tail_moved()
            raise
        except Exception as exc:
            self.lose(exc)
            raise
        self._tail_version = result.version.version_id
        del self._pending[:len(group)]

    async def commit(self, object_key: str, position: int, length: int, entries: int, record_count: int) -> IndexEntry:
        """Commit one slice on its own (the writer batches ``prepare``/``finish`` instead)."""
        ops, _ = self.prepare(object_key, position, length, entries, record_count)
        return await self.finish(await self.meta.put_many(ops))

    async def close(self) -> None:
        """Nothing to flush: slices not yet grouped stay in the tail for the next session."""


async def acquire(meta: MetadataStore, stream_id: int, owner: str, *, new_stream: bool = False) -> AppendSession:
    """Take over appends to a stream, fencing any earlier session.

    ``new_stream``: the caller just created the stream, so its session and tail records are
    most likely absent; they are written expecting that, without a read first (a writer that
    came meanwhile fails those writes, which then read and retry as usual)."""
    partition = records.stream_partition(stream_id)

    def bump(old: bytes | None) -> bytes:
        token = records.decode(old).get("token", 0) + 1
        return records.encode({"token": token, "owner": owner, "since": int(time.time() * 1000)})

    # The tail is read beside the session's bump (one round trip less): a tail moved meanwhile
    # fails the CAS below, which reads it again.
    if new_stream:
        session = await cas.update(meta, records.session_key(stream_id), bump, partition_key=partition,
                                   likely_absent=True)
        read_ahead = [None]
    else:
        session, first_read = await asyncio.gather(
            cas.update(meta, records.session_key(stream_id), bump, partition_key=partition),
            meta.get(records.tail_key(stream_id), partition_key=partition))
        read_ahead = [first_read]
    token = records.decode(session.value)["token"]

    async def stamp_tail() -> AppendSession:
        # Retried whenever a concurrent commit or acquire moved the tail meanwhile.
        current = read_ahead.pop() if read_ahead else await meta.get(records.tail_key(stream_id),
                                                                    partition_key=partition)
        if current is None:
            tail, expected = Tail(0, 0, token), EXPECT_ABSENT
        else:
            tail, expected = Tail.decode(current.value), current.version.version_id
            if tail.token > token:
                raise StreamFenced(f"stream {stream_id}: a newer session ({tail.token}) exists")
            await _write_pending_group(meta, stream_id, tail)
            tail = Tail(tail.next, tail.size, token)
        result = await meta.put(records.tail_key(stream_id), tail.encode(),
                                expected_version_id=expected, partition_key=partition)
        log.debug("stream %d: append session %d acquired by %s at offset %d", stream_id, token, owner, tail.next)
        return AppendSession(meta, stream_id, token, tail, result.version.version_id)

    return await cas.retry(stamp_tail)


async def _write_pending_group(meta: MetadataStore, stream_id: int, tail: Tail) -> None:
    """Write the slices a previous session left in ``tail.pending`` as one idx group.

    Only then may the new tail drop them. A commit that writes a group drops its
    slices from the tail only at the next commit, so a prefix of ``pending`` may be
    an idx group already: only the rest is written (groups never overlap, so
    compaction can replace them group by group). Trim never deletes an idx group
    that overlaps ``tail.pending`` (see ``StreamStorage.trim``), and releases are
    idempotent, so writing a group twice is harmless.
    """
    pending = list(tail.pending)
    partition = records.stream_partition(stream_id)
    for i in range(min(GROUP_SIZE, len(pending)) - 1, -1, -1):
        rec = await meta.get(records.index_key(stream_id, pending[i].last), partition_key=partition)
        if rec is not None and records.decode_group(rec.value)[0].base <= pending[0].base:
            pending = pending[i + 1:]
            break
    if not pending:
        return
    try:
        await meta.put(records.index_key(stream_id, pending[-1].last),
                       records.encode_group([records.encode_entry_json(e) for e in pending]),
                       expected_version_id=EXPECT_ABSENT, partition_key=partition)
    except UnexpectedVersion:
        pass  # the previous session wrote it already
