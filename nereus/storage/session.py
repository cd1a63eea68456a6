"""Append sessions: the fencing protocol that keeps one committer per stream.

Rules (invariants 2 and 3 of ARCHITECTURE.md):

1. Acquire bumps ``session.token`` (CAS), then stamps the new token into ``tail``
   (CAS). From that moment every CAS on ``tail`` by an older session fails,
   because it expects a version of ``tail`` that no longer exists.
2. A slice commits by a CAS on ``tail`` with the version this session last wrote.
   Success is the linearization point: the offsets ``[next, next + records)``
   belong to the slice. Any other outcome (the tail changed under us) means another
   session took over: this session is fenced for good and its slice never becomes
   visible.
3. After the commit the slice's ``idx`` key is written; the next commit of the
   same session waits for it, so at most the tail's last slice lacks an idx key.
   A new session repairs that key on acquire.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ..meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ..meta import cas
from . import records
from .errors import StreamFenced
from .records import IndexEntry, Tail

log = logging.getLogger(__name__)


class AppendSession:
    """The writer-side state of one stream, valid while not fenced."""

    def __init__(self, meta: MetadataStore, stream_id: int, token: int, tail: Tail, tail_version: int):
        self.meta = meta
        self.stream_id = stream_id
        self.token = token
        self.next_offset = tail.next
        self.size = tail.size
        self.last = tail.last
        self.fenced = False
        self._tail_version = tail_version
        self._partition = records.stream_partition(stream_id)
        self._pending_index: asyncio.Task | None = None

    async def commit(self, object_key: str, position: int, length: int, entries: int, record_count: int) -> IndexEntry:
        """Commit one slice; returns its index entry (with the assigned base offset)."""
        if self.fenced:
            raise StreamFenced(f"stream {self.stream_id}: session {self.token} is fenced")
        await self._index_written()
        entry = IndexEntry(object_key, position, length, self.next_offset, record_count, entries, self.size + length,
                           timestamp=int(time.time() * 1000))
        tail = Tail(entry.base + record_count, entry.size, self.token, entry)
        try:
            result = await self.meta.put(
                records.tail_key(self.stream_id), tail.encode(),
                expected_version_id=self._tail_version, partition_key=self._partition,
            )
        except UnexpectedVersion:
            self.fenced = True
            raise StreamFenced(f"stream {self.stream_id}: taken over by a newer append session") from None
        except Exception:
            # The outcome is unknown (the write may have landed): only the tail can tell.
            if not await self._landed(entry):
                raise
        else:
            self._tail_version = result.version.version_id
        self.next_offset, self.size, self.last = tail.next, tail.size, entry
        self._pending_index = asyncio.ensure_future(self._write_index(entry))
        return entry

    async def _landed(self, entry: IndexEntry) -> bool:
        current = await self.meta.get(records.tail_key(self.stream_id), partition_key=self._partition)
        if current is None:
            self.fenced = True
            raise StreamFenced(f"stream {self.stream_id} was deleted")
        tail = Tail.decode(current.value)
        if tail.token != self.token:
            self.fenced = True
            raise StreamFenced(f"stream {self.stream_id}: taken over by a newer append session")
        self._tail_version = current.version.version_id
        return tail.last == entry

    async def _write_index(self, entry: IndexEntry) -> None:
        await self.meta.put(records.index_key(self.stream_id, entry.last), records.encode(entry.to_json()),
                            partition_key=self._partition)

    async def _index_written(self) -> None:
        if self._pending_index is not None:
            task, self._pending_index = self._pending_index, None
            await task

    async def close(self) -> None:
        """Wait for the last index write; the session stays valid for a successor to fence."""
        try:
            await self._index_written()
        except Exception:  # the next session repairs the idx key from the tail
            log.warning("stream %d: index write failed at close", self.stream_id, exc_info=True)


async def acquire(meta: MetadataStore, stream_id: int, owner: str) -> AppendSession:
    """Take over appends to a stream, fencing any earlier session."""
    partition = records.stream_partition(stream_id)

    def bump(old: bytes | None) -> bytes:
        token = records.decode(old).get("token", 0) + 1
        return records.encode({"token": token, "owner": owner, "since": int(time.time() * 1000)})

    session = await cas.update(meta, records.session_key(stream_id), bump, partition_key=partition)
    token = records.decode(session.value)["token"]
    while True:
        current = await meta.get(records.tail_key(stream_id), partition_key=partition)
        if current is None:
            tail, expected = Tail(0, 0, token, None), EXPECT_ABSENT
        else:
            tail, expected = Tail.decode(current.value), current.version.version_id
            if tail.token > token:
                raise StreamFenced(f"stream {stream_id}: a newer session ({tail.token}) exists")
            await _repair_index(meta, stream_id, tail)
            tail = Tail(tail.next, tail.size, token, tail.last)
        try:
            result = await meta.put(records.tail_key(stream_id), tail.encode(),
                                    expected_version_id=expected, partition_key=partition)
        except UnexpectedVersion:
            continue  # a concurrent commit or acquire moved the tail; look again
        log.debug("stream %d: append session %d acquired by %s at offset %d", stream_id, token, owner, tail.next)
        return AppendSession(meta, stream_id, token, tail, result.version.version_id)


async def _repair_index(meta: MetadataStore, stream_id: int, tail: Tail) -> None:
    """Write the idx key of the tail's last slice if its writer died before doing so.

    Trim never deletes the idx key of the tail's last slice (see ``gc``), so an
    absent key here always means "not written yet", never "released".
    """
    last = tail.last
    if last is None:
        return
    partition = records.stream_partition(stream_id)
    try:
        await meta.put(records.index_key(stream_id, last.last), records.encode(last.to_json()),
                       expected_version_id=EXPECT_ABSENT, partition_key=partition)
    except UnexpectedVersion:
        pass  # already there
