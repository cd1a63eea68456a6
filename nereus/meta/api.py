"""The metadata-plane interface: Oxia's semantics, one async API for every backend.

Every key lives on exactly one shard of a namespace. A key's shard is chosen by
hashing the key, or the ``partition_key`` when one is given, so that records sharing
a partition key are co-located and can be range-scanned together. All operations on
one key are linearizable. Keys sort in Oxia's hierarchical order (see
``nereus.meta.keys.compare_keys``): segment by segment, and at the first differing
position a key that has fewer ``/`` left sorts first.

Secondary indexes (as Oxia's): a put may carry ``secondary_indexes``, entries
(index name, secondary key) that point to the record's key. They are stored with
the record, replaced by its next put and removed with it. ``get``, ``list`` and
``range_scan`` with ``use_index=name`` look keys up by secondary key instead: they
compare and range over secondary keys (in key order, then by primary key) and
return primary keys and their records.

Writes take an optional ``expected_version_id``: ``EXPECT_ABSENT`` means "the key
must not exist", any other value must equal the record's current version id.
A mismatch raises ``UnexpectedVersion``.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterable, Mapping, Sequence

from .keys import compare_keys, key_after
from .validation import check_page_size

log = logging.getLogger(__name__)

#: ``expected_version_id`` value meaning "the record must not exist yet".
EXPECT_ABSENT = -1


class Comparison(enum.Enum):
    """How ``get`` matches a key: the key itself, or its nearest neighbour."""

    EQUAL = 0
    FLOOR = 1  # highest key <= k
    CEILING = 2  # lowest key >= k
    LOWER = 3  # highest key < k
    HIGHER = 4  # lowest key > k


class NotificationType(enum.Enum):
    KEY_CREATED = 0
    KEY_MODIFIED = 1
    KEY_DELETED = 2
    KEY_RANGE_DELETED = 3


@dataclass(frozen=True, slots=True)
class Version:
    """Version stamp of a record, as Oxia reports it."""

    version_id: int  # unique and increasing within a shard; changes on every write
    modifications_count: int  # 0 when created, +1 on every later put
    created_timestamp: int  # milliseconds since the epoch
    modified_timestamp: int  # milliseconds since the epoch
    session_id: int | None = None  # set for ephemeral records
    client_identity: str | None = None  # set for ephemeral records


@dataclass(frozen=True, slots=True)
class PutResult:
    key: str  # the stored key (differs from the requested one for sequence keys)
    version: Version


#: A put's secondary index entries: ``{index name: secondary key}`` or (name, key) pairs.
SecondaryIndexes = Mapping[str, str] | Iterable[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class PutOp:
    """One put of a ``put_many`` batch (same meaning as ``put``'s arguments)."""

    key: str
    value: bytes
    expected_version_id: int | None = None
    partition_key: str | None = None
    secondary_indexes: SecondaryIndexes | None = None
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Record:
    key: str
    value: bytes | None  # None when the read asked for no value
    version: Version


@dataclass(frozen=True, slots=True)
class Notification:
    type: NotificationType
    key: str
    version_id: int | None = None  # absent for deletions
    key_range_end: str | None = None  # exclusive end, for KEY_RANGE_DELETED


class NotificationStream(abc.ABC):
    """Change notifications from every shard of a namespace, in per-shard order."""

    @abc.abstractmethod
    def __aiter__(self) -> AsyncIterator[Notification]: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> "NotificationStream":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class MetadataStore(abc.ABC):
    """A client of one namespace of the metadata plane.

    Ephemeral records are bound to this client's session (one per shard, created
    on first use and kept alive by heartbeats); they disappear when the client is
    closed or its session times out.

    A session is lost when the server says it no longer exists, or when none of
    its heartbeats has succeeded for ``session_timeout`` seconds (the server may
    have expired it by then: a frozen or partitioned client cannot tell). The
    client then forgets it (the next ephemeral put opens a new one) and calls its
    session listeners, so that the owner can stop acting on what its ephemeral
    records claimed and register again.
    """

    def __init__(self) -> None:
        self._session_listeners: list[Callable[[], None]] = []

    def add_session_listener(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` on the event loop each time one of this client's sessions is lost.

        Never called once the client is closed. Exceptions are logged, not raised.
        """
        self._session_listeners.append(callback)

    def _session_lost(self) -> None:
        """Tell the session listeners that a session was lost (backends call this)."""
        for callback in list(self._session_listeners):
            try:
                callback()
            except Exception:  # the owner's bug must not break the client's heartbeats
                log.exception("session listener %r failed", callback)

    # The session bookkeeping of a backend, by its handle of a shard: the session it holds,
    # when its lease was last renewed, and the shards whose session was lost and not yet replaced.
    identity: str
    _closed: bool
    _sessions: dict[Any, int]
    _renewed: dict[Any, float]
    _lost: set[Any]

    def _lose(self, shard: Any, sid: int, why: str, *, close: bool = False) -> None:
        """Forget session ``sid`` of ``shard`` and tell the listeners, once per session.

        With ``close`` the server is asked to close it too, so that its ephemeral
        records go now rather than at the server's own expiry.
        """
        if self._closed or self._sessions.get(shard) != sid:
            return  # closing is no loss; or this session was handled already
        del self._sessions[shard]
        del self._renewed[shard]
        self._lost.add(shard)
        logging.getLogger(type(self).__module__).warning(
            "session %d of %s on shard %s lost: %s", sid, self.identity, self._shard_name(shard), why)
        if close:
            self._close_lapsed(shard, sid)
        self._session_lost()

    def _shard_name(self, shard: Any) -> str:
        return str(shard)

    @abc.abstractmethod
    def _close_lapsed(self, shard: Any, sid: int) -> None:
        """Ask the server to close a lapsed session, best effort, without waiting."""

    @property
    @abc.abstractmethod
    def sessions_healthy(self) -> bool:
        """True while every session this client holds is within its lease; False from
        a session's loss until an ephemeral put opens its replacement."""

    @abc.abstractmethod
    async def put(
        self,
        key: str,
        value: bytes,
        *,
        expected_version_id: int | None = None,
        partition_key: str | None = None,
        sequence_key_deltas: Sequence[int] | None = None,
        ephemeral: bool = False,
        secondary_indexes: SecondaryIndexes | None = None,
    ) -> PutResult:
        """Create or replace a record.

        ``secondary_indexes`` replace the entries the previous version had.
        With ``sequence_key_deltas`` (requires ``partition_key``, forbids
        ``expected_version_id``) the server appends ``-%020d`` suffixes to ``key``:
        each suffix is the previous highest suffix under ``key`` plus its delta, and
        the stored key is returned in the result.
        """

    async def put_many(self, ops: Sequence[PutOp]) -> list[PutResult | Exception]:
        """Several puts sent together, as Oxia's write requests carry them.

        Each op succeeds or fails on its own (there is no atomicity across ops);
        the result list holds a PutResult or the exception of each op, in order.
        Ops routed to the same shard are applied in the order given. Backends
        override this to send one message per shard instead of one per op.
        """
        return await asyncio.gather(
            *(self.put(op.key, op.value, expected_version_id=op.expected_version_id, partition_key=op.partition_key,
                       ephemeral=op.ephemeral, secondary_indexes=op.secondary_indexes)
              for op in ops),
            return_exceptions=True,
        )

    @abc.abstractmethod
    async def delete(
        self,
        key: str,
        *,
        expected_version_id: int | None = None,
        partition_key: str | None = None,
    ) -> bool:
        """Delete a record; False if it did not exist (and no version was expected)."""

    @abc.abstractmethod
    async def delete_range(
        self, min_key_inclusive: str, max_key_exclusive: str, *, partition_key: str | None = None
    ) -> None:
        """Delete every key in ``[min, max)`` (on all shards unless a partition key is given)."""

    @abc.abstractmethod
    async def get(
        self,
        key: str,
        *,
        comparison: Comparison = Comparison.EQUAL,
        partition_key: str | None = None,
        include_value: bool = True,
        use_index: str | None = None,
    ) -> Record | None:
        """Read the record matching ``key`` under ``comparison``; None if there is none.

        Without a partition key, non-EQUAL comparisons (and every lookup by index)
        consult every shard and return the nearest match overall. With
        ``use_index``, ``key`` is a secondary key of that index and the record (with
        its primary key) of the matching entry is returned: EQUAL, CEILING, HIGHER
        and an exact FLOOR take the lowest primary key of their secondary key, LOWER
        and an inexact FLOOR the highest one of the nearest lower secondary key.
        """

    async def get_many(self, keys: Sequence[str], *,
                       partition_keys: Sequence[str | None] | None = None) -> list[Record | None]:
        """The record of each key (EQUAL), None where there is none, in order.

        ``partition_keys``: each key's partition key (None: routed by the key). Backends
        override this to read each shard's keys in one request instead of one per key.
        """
        routes = partition_keys if partition_keys is not None else [None] * len(keys)
        return list(await asyncio.gather(*(self.get(key, partition_key=pk) for key, pk in zip(keys, routes))))

    def list(
        self,
        min_key_inclusive: str,
        max_key_exclusive: str,
        *,
        partition_key: str | None = None,
        page_size: int = 1000,
        use_index: str | None = None,
    ) -> AsyncIterator[str]:
        """Keys in ``[min, max)`` in key order, fetched page by page.

        With ``use_index``, the primary keys of the entries of that index whose
        secondary keys are in ``[min, max)``, in index order.
        """
        return self._scan(min_key_inclusive, max_key_exclusive, partition_key, page_size, False, use_index)

    async def list_page(
        self,
        min_key_inclusive: str,
        max_key_exclusive: str,
        *,
        start_after: str | None = None,
        limit: int = 1000,
        partition_key: str | None = None,
    ) -> list[str]:
        """One page of ``list``: at most ``limit`` keys of ``[min, max)`` that sort after ``start_after``.

        A listing resumes from the last key of the previous page, so a caller holds one
        page at a time however many keys the range has.
        """
        check_page_size(limit)
        lo = min_key_inclusive
        if start_after is not None:
            resume = key_after(start_after)
            if compare_keys(resume, lo) > 0:
                lo = resume
        out: list[str] = []
        if compare_keys(lo, max_key_exclusive) >= 0:
            return out
        keys = self.list(lo, max_key_exclusive, partition_key=partition_key, page_size=limit)
        try:
            async for key in keys:
                out.append(key)
                if len(out) >= limit:
                    break
        finally:
            await keys.aclose()  # type: ignore[attr-defined]
        return out

    def range_scan(
        self,
        min_key_inclusive: str,
        max_key_exclusive: str,
        *,
        partition_key: str | None = None,
        page_size: int = 1000,
        use_index: str | None = None,
    ) -> AsyncIterator[Record]:
        """Records in ``[min, max)`` in key order, fetched page by page.

        With ``use_index``, the records of the entries of that index whose secondary
        keys are in ``[min, max)``, in index order.
        """
        return self._scan(min_key_inclusive, max_key_exclusive, partition_key, page_size, True, use_index)

    @abc.abstractmethod
    def _scan(self, lo: str, hi: str, partition_key: str | None, page_size: int,
              with_values: bool, use_index: str | None = None) -> AsyncIterator[Any]:
        """Backend part of ``list`` (keys) and ``range_scan`` (Records when ``with_values``)."""

    @abc.abstractmethod
    def notifications(self) -> NotificationStream:
        """Subscribe to changes made after this call, on every shard."""

    @abc.abstractmethod
    async def shard_of(self, key: str, *, partition_key: str | None = None) -> str:
        """The name of the shard holding ``key`` (session ids are unique within a shard only)."""

    @abc.abstractmethod
    async def end_session_of(self, key: str, session_id: int, *, partition_key: str | None = None) -> bool:
        """Close session ``session_id`` of the shard holding ``key``, as its own client would:
        every ephemeral record of that session in that shard is deleted now, not at its expiry.

        For the records of a client known dead (another client's session: the lease it no
        longer renews is cut short). False if the session was gone already.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Close this client's sessions (deleting its ephemeral records)."""

    async def __aenter__(self) -> "MetadataStore":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
