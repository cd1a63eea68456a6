"""``EmbeddedMetadataStore``: a ``MetadataStore`` client of one namespace of an Engine."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from typing import TYPE_CHECKING, Any, AsyncIterator, Sequence

from ..api import Comparison, MetadataStore, NotificationStream, PutOp, PutResult, Record, SecondaryIndexes
from ..errors import InvalidRequest, MetadataClosed, MetadataError, SessionNotFound
from ..keys import encode_key, validate_key
from ..validation import (check_deltas, check_expected, check_index_name, check_indexes, check_key,
                          check_page_size, check_value)
from .shard import Shard
from .store import (CLOSE_SESSION, CREATE_SESSION, DELETE, DELETE_RANGE, GET, GET_INDEX, LIST, LIST_INDEX,
                    PUT)

if TYPE_CHECKING:
    from .engine import Engine, Namespace

log = logging.getLogger(__name__)

_NEAREST_IS_MIN = {Comparison.CEILING: True, Comparison.HIGHER: True,
                   Comparison.FLOOR: False, Comparison.LOWER: False}


class EmbeddedMetadataStore(MetadataStore):
    """Client of one namespace; sessions (one per shard) are created on first
    ephemeral write and kept alive by a heartbeat task until ``close()``."""

    def __init__(self, engine: "Engine", ns: "Namespace", *, identity: str | None,
                 session_timeout: float):
        if session_timeout <= 0:
            raise InvalidRequest("session_timeout must be positive")
        super().__init__()
        self._engine = engine
        self._ns = ns
        self.identity = identity or f"nereus-{uuid.uuid4().hex[:12]}"
        self.session_timeout = session_timeout
        self._sessions: dict[Shard, int] = {}
        # Engine-clock time at which the last successful keepalive (or the create)
        # of each held session was sent: the server's deadline is at least that
        # plus the timeout, so past it the session may be gone.
        self._renewed: dict[Shard, float] = {}
        self._lost: set[Shard] = set()  # shards whose session was lost and not yet replaced
        self._closing: set[asyncio.Future] = set()  # best-effort closes of lapsed sessions
        self._creating: dict[Shard, asyncio.Future[int]] = {}
        self._heartbeat: asyncio.Task[None] | None = None
        self._heartbeats_paused = False
        self._streams: list[NotificationStream] = []
        self._closed = False
        self.owns_engine = False  # set by ``connect``: close the engine with the client

    @property
    def namespace(self) -> str:
        return self._ns.name

    def _check(self) -> None:
        if self._closed or self._engine.closed:
            raise MetadataClosed("metadata client is closed")

    def _route(self, key: str, partition_key: str | None) -> Shard:
        if partition_key is None:
            return self._ns.shard_for(key)
        if not isinstance(partition_key, str):
            raise InvalidRequest("partition_key must be a str")
        return self._ns.shard_for(partition_key)

    # ------------------------------------------------------------------ writes
    async def put(self, key: str, value: bytes, *, expected_version_id: int | None = None,
                  partition_key: str | None = None, sequence_key_deltas: Sequence[int] | None = None,
                  ephemeral: bool = False, secondary_indexes: SecondaryIndexes | None = None) -> PutResult:
        self._check()
        ekey = check_key(key)
        value = check_value(value)
        expected = check_expected(expected_version_id)
        deltas = check_deltas(sequence_key_deltas, partition_key, expected)
        indexes = check_indexes(secondary_indexes)
        shard = self._route(key, partition_key)
        sid = await self._session(shard) if ephemeral else 0
        try:
            return await shard.call(PUT, key, ekey, value, expected, sid, self.identity, deltas, indexes)
        except SessionNotFound:
            self._lose(shard, sid, "the server no longer has it")  # the next ephemeral put opens a new one
            raise

    async def put_many(self, ops: Sequence[PutOp]) -> list[PutResult | Exception]:
        """Every op of a shard queued at once (so one batch of the shard takes them all, not a
        first few that woke its thread) and one wait for all: no coroutine per op."""
        self._check()
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future | None] = []
        results: list[PutResult | Exception | None] = [None] * len(ops)
        by_shard: dict[Shard, list[tuple]] = {}
        sessions: dict[Shard, int] = {}  # the session of each shard an ephemeral op goes to
        for op in ops:
            if op.ephemeral:
                try:
                    shard = self._route(op.key, op.partition_key)
                except MetadataError:
                    continue  # reported as that op's result below
                if shard not in sessions:
                    sessions[shard] = await self._session(shard)
        for i, op in enumerate(ops):
            try:
                shard = self._route(op.key, op.partition_key)
                fut = loop.create_future()
                call = (PUT, fut, op.key, check_key(op.key), check_value(op.value),
                        check_expected(op.expected_version_id), sessions[shard] if op.ephemeral else 0,
                        self.identity, None, check_indexes(op.secondary_indexes))
            except MetadataError as e:
                results[i] = e
                futures.append(None)
                continue
            by_shard.setdefault(shard, []).append(call)
            futures.append(fut)
        for shard, calls in by_shard.items():
            shard.submit_many(calls)
        pending = [f for f in futures if f is not None]
        if pending:
            await asyncio.wait(pending)
        for i, fut in enumerate(futures):
            if fut is not None:
                results[i] = fut.exception() or fut.result()
                if isinstance(results[i], SessionNotFound) and ops[i].ephemeral:
                    shard = self._route(ops[i].key, ops[i].partition_key)
                    self._lose(shard, sessions[shard], "the server no longer has it")
        return results  # type: ignore[return-value]

    async def delete(self, key: str, *, expected_version_id: int | None = None,
                     partition_key: str | None = None) -> bool:
        self._check()
        ekey = check_key(key)
        expected = check_expected(expected_version_id)
        return await self._route(key, partition_key).call(DELETE, key, ekey, expected)

    async def delete_range(self, min_key_inclusive: str, max_key_exclusive: str, *,
                           partition_key: str | None = None) -> None:
        self._check()
        elo = encode_key(validate_key(min_key_inclusive))
        ehi = encode_key(validate_key(max_key_exclusive))
        shards = self._ns.shards if partition_key is None else [self._route("", partition_key)]
        await asyncio.gather(*(s.call(DELETE_RANGE, min_key_inclusive, max_key_exclusive, elo, ehi)
                               for s in shards))

    # ------------------------------------------------------------------- reads
    async def get(self, key: str, *, comparison: Comparison = Comparison.EQUAL,
                  partition_key: str | None = None, include_value: bool = True,
                  use_index: str | None = None) -> Record | None:
        self._check()
        if not isinstance(comparison, Comparison):
            raise InvalidRequest(f"invalid comparison {comparison!r}")
        if use_index is not None:
            return await self._get_by_index(key, comparison, partition_key, include_value, use_index)
        ekey = check_key(key)
        if comparison is Comparison.EQUAL or partition_key is not None:
            return await self._route(key, partition_key).read(GET, ekey, comparison, include_value)
        found = [r for r in await asyncio.gather(
            *(s.read(GET, ekey, comparison, include_value) for s in self._ns.shards)) if r is not None]
        if not found:
            return None
        pick = min if _NEAREST_IS_MIN[comparison] else max
        return pick(found, key=lambda r: encode_key(r.key))

    async def get_many(self, keys: Sequence[str], *,
                       partition_keys: Sequence[str | None] | None = None) -> list[Record | None]:
        self._check()
        routes = partition_keys if partition_keys is not None else [None] * len(keys)
        # Each get is a point read of its shard: futures, no task per key.
        return list(await asyncio.gather(*(self._route(key, pk).read(GET, check_key(key), Comparison.EQUAL, True)
                                           for key, pk in zip(keys, routes))))

    async def _get_by_index(self, key: str, comparison: Comparison, partition_key: str | None,
                            include_value: bool, index: str) -> Record | None:
        check_index_name(index)
        esec = encode_key(validate_key(key))
        shards = self._ns.shards if partition_key is None else [self._route("", partition_key)]
        found = [r for r in await asyncio.gather(
            *(s.read(GET_INDEX, index, esec, comparison, include_value) for s in shards)) if r is not None]
        if not found:
            return None
        # Across shards: the nearest secondary key, then the primary key as one shard orders them.
        pick = max if comparison in (Comparison.FLOOR, Comparison.LOWER) else min
        exact = [f for f in found if f[1] == key]
        if comparison is Comparison.FLOOR and exact:
            pick, found = min, exact  # an exact FLOOR takes the first entry of that secondary key
        return pick(found, key=lambda f: (encode_key(f[1]), encode_key(f[0].key)))[0]

    async def _scan(self, lo: str, hi: str, partition_key: str | None, page_size: int,
                    with_values: bool, use_index: str | None = None) -> AsyncIterator[Any]:
        self._check()
        if use_index is not None:
            async for item in self._scan_index(lo, hi, partition_key, page_size, with_values, use_index):
                yield item
            return
        elo, ehi = encode_key(validate_key(lo)), encode_key(validate_key(hi))
        check_page_size(page_size)
        shards = self._ns.shards if partition_key is None else [self._route("", partition_key)]
        starts = [elo] * len(shards)

        async def fetch(i: int) -> list:
            page = await shards[i].call(LIST, starts[i], ehi, page_size, with_values)
            if page:
                starts[i] = page[-1][0] + b"\x00"  # smallest byte string after the last key
            return page

        # Merged by encoded key, which orders exactly as Oxia's key order.
        async for item in self._merged(len(shards), page_size, fetch, lambda item: item[0]):
            yield item[1]

    async def _scan_index(self, lo: str, hi: str, partition_key: str | None, page_size: int,
                          with_values: bool, index: str) -> AsyncIterator[Any]:
        check_index_name(index)
        elo, ehi = encode_key(validate_key(lo)), encode_key(validate_key(hi))
        check_page_size(page_size)
        shards = self._ns.shards if partition_key is None else [self._route("", partition_key)]
        after: list[tuple[bytes, bytes] | None] = [None] * len(shards)

        async def fetch(i: int) -> list:
            page = await shards[i].call(LIST_INDEX, index, elo, ehi, after[i], page_size, with_values)
            if page:
                after[i] = page[-1][:2]
            return page

        # Merged by (index key, primary key): one index's order across shards.
        async for item in self._merged(len(shards), page_size, fetch, lambda item: item[:2]):
            yield item[3]

    async def _merged(self, count: int, page_size: int, fetch, order) -> AsyncIterator[Any]:
        """The items of ``count`` shards' pages, merged by ``order(item)``.

        One cursor per shard, refilled a page at a time by ``fetch(i)`` (a page shorter
        than ``page_size`` is the shard's last), and only when it has run empty.
        """
        bufs: list[deque] = [deque() for _ in range(count)]
        done = [False] * count

        async def fill(i: int) -> None:
            page = await fetch(i)
            bufs[i].extend(page)
            done[i] = len(page) < page_size

        while True:
            need = [i for i in range(count) if not bufs[i] and not done[i]]
            if need:
                self._check()
                await asyncio.gather(*(fill(i) for i in need))
            best = -1
            for i, buf in enumerate(bufs):
                if buf and (best < 0 or order(buf[0]) < order(bufs[best][0])):
                    best = i
            if best < 0:
                return
            yield bufs[best].popleft()

    # ----------------------------------------------------------- notifications
    def notifications(self) -> NotificationStream:
        self._check()
        sub = self._ns.hub.subscribe()
        self._streams.append(sub)
        return sub

    # ---------------------------------------------------------------- sessions
    @property
    def sessions_healthy(self) -> bool:
        now = self._engine.clock.monotonic()
        return not self._lost and all(now - t < self.session_timeout for t in self._renewed.values())

    async def _session(self, shard: Shard) -> int:
        sid = self._sessions.get(shard)
        if sid is not None:
            if sid not in shard.sessions:
                self._lose(shard, sid, "the server no longer has it")
            elif not self._within_lease(shard):
                self._lose(shard, sid, "its lease ran out", close=True)
            else:
                return sid
        pending = self._creating.get(shard)
        if pending is None:
            pending = asyncio.ensure_future(self._open_session(shard))
            self._creating[shard] = pending
            pending.add_done_callback(lambda _f: self._creating.pop(shard, None))
        return await asyncio.shield(pending)

    async def _open_session(self, shard: Shard) -> int:
        sent = self._engine.clock.monotonic()
        sid = await shard.call(CREATE_SESSION, int(self.session_timeout * 1000), self.identity)
        self._sessions[shard] = sid
        self._renewed[shard] = sent
        self._lost.discard(shard)
        log.debug("client %s opened session %d on shard %s", self.identity, sid, shard.name)
        if self._heartbeat is None and not self._heartbeats_paused:
            self._heartbeat = asyncio.create_task(self._heartbeats(), name=f"meta-heartbeat-{self.identity}")
        return sid

    async def _heartbeats(self) -> None:
        interval = max(self.session_timeout / 4, 0.01)  # several beats per timeout
        while True:
            await asyncio.sleep(interval)
            # Leases first: after a freeze longer than the timeout the session may be
            # gone already, and a keepalive that still succeeds must not hide it.
            for shard, sid in list(self._sessions.items()):
                if not self._within_lease(shard):
                    self._lose(shard, sid, "its lease ran out", close=True)
            for shard, sid in list(self._sessions.items()):
                sent = self._engine.clock.monotonic()
                if shard.sessions.keepalive(sid):
                    self._renewed[shard] = sent
                else:
                    self._lose(shard, sid, "the server no longer has it")

    def _within_lease(self, shard: Shard) -> bool:
        return self._engine.clock.monotonic() - self._renewed[shard] < self.session_timeout

    def _shard_name(self, shard: Shard) -> str:
        return shard.name

    async def shard_of(self, key: str, *, partition_key: str | None = None) -> str:
        return self._route(key, partition_key).name

    async def end_session_of(self, key: str, session_id: int, *, partition_key: str | None = None) -> bool:
        self._check()
        shard = self._route(key, partition_key)
        shard.sessions.closed(session_id)  # no expiry race with the close below
        try:
            await shard.call(CLOSE_SESSION, session_id)
        except SessionNotFound:
            return False
        return True

    def _close_lapsed(self, shard: Shard, sid: int) -> None:
        """Best effort: the server may have expired it already, or be closing."""
        shard.sessions.closed(sid)  # no keepalive or expiry from now on
        try:
            fut = shard.call(CLOSE_SESSION, sid)
        except MetadataClosed:
            return
        self._closing.add(fut)

        def done(f: asyncio.Future) -> None:
            self._closing.discard(f)
            if not f.cancelled() and f.exception() is not None:
                log.debug("closing lapsed session %d of %s failed: %s", sid, self.identity, f.exception())

        fut.add_done_callback(done)

    def _pause_heartbeats(self) -> None:
        """Test hook: stop heartbeating, as a hung or partitioned client would."""
        self._heartbeats_paused = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None

    def _resume_heartbeats(self) -> None:
        """Test hook: the hung client wakes up and heartbeats again, as a woken process does: a
        session whose lease ran out meanwhile is found lost at the first beat, the others kept alive."""
        self._heartbeats_paused = False
        if self._heartbeat is None and self._sessions and not self._closed:
            self._heartbeat = asyncio.create_task(self._heartbeats(), name=f"meta-heartbeat-{self.identity}")

    # ------------------------------------------------------------------- close
    async def close(self) -> None:
        if self._closed:
            return
        try:
            await self._close()
        finally:
            if self.owns_engine:
                await self._engine.close()

    async def _close(self) -> None:
        self._closed = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        for stream in self._streams:
            await stream.close()
        await asyncio.gather(*self._closing, return_exceptions=True)
        if self._engine.closed:
            return
        closing = []
        for shard, sid in self._sessions.items():
            shard.sessions.closed(sid)  # no keepalive or expiry from now on
            closing.append(shard.call(CLOSE_SESSION, sid))
        self._sessions.clear()
        self._renewed.clear()
        for res in await asyncio.gather(*closing, return_exceptions=True):
            if isinstance(res, MetadataError) and not isinstance(res, SessionNotFound):
                log.warning("closing a session of %s failed: %s", self.identity, res)
