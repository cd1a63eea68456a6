"""``GET /console/api/messages/persistent/{tenant}/{namespace}/{topic}``: the console's message browser.

Query: ``count`` (default 20, at most ``MAX_COUNT``) and one of ``offset`` (the
messages from that offset on, in each partition), ``time`` (those published at or
after that time, epoch milliseconds; the stream's time index says where to start) or
neither (the latest ones); ``partition`` limits a partitioned topic to one partition;
``key`` keeps only the messages with that key. The answer's messages are ordered by
publish time (then partition and offset); see ``decoding.py`` for one message's fields.

Reads go through each partition's stream handle, as consumers' reads do, and touch no
cursor. They are bounded so a browser cannot hurt the broker: at most
``MAX_READ_BYTES`` of entries are read per request (a key filter scans no further) and
at most ``MAX_SHOWN_BYTES`` of values are answered; ``complete`` is false when a bound
stopped the scan. A partition owned by another broker is read by that broker (the
same request for that partition, forwarded).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from ...ledger.naming import TopicName
from ...storage import OffsetOutOfRange, time_index
from ...topics import NotOwner, schemas
from ..admin.common import AdminError, context, partitions, require_topic, topic_name
from . import decoding

DEFAULT_COUNT = 20
MAX_COUNT = 500
MAX_READ_BYTES = 16 << 20
MAX_SHOWN_BYTES = 4 << 20
_FETCH_BYTES = 1 << 20
FORWARD_TIMEOUT = 30.0


@dataclass
class Budget:
    """What one request may still read and answer."""

    read: int = MAX_READ_BYTES
    shown: int = MAX_SHOWN_BYTES
    exhausted: bool = False


@dataclass(frozen=True)
class Query:
    count: int
    offset: int | None
    time: int | None
    key: str | None
    partition: int | None

    @property
    def mode(self) -> str:
        return "offset" if self.offset is not None else "time" if self.time is not None else "latest"


def _int(request: web.Request, name: str, lowest: int) -> int | None:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise AdminError(400, f"{name} must be an integer, not {raw!r}") from None
    if value < lowest:
        raise AdminError(400, f"{name} must be at least {lowest}")
    return value


def parse_query(request: web.Request) -> Query:
    count = _int(request, "count", 1)
    if count is not None and count > MAX_COUNT:
        raise AdminError(400, f"count must be at most {MAX_COUNT}")
    offset, at = _int(request, "offset", 0), _int(request, "time", 0)
    if offset is not None and at is not None:
        raise AdminError(400, "give offset or time, not both")
    key = request.query.get("key")
    return Query(count or DEFAULT_COUNT, offset, at, key if key else None, _int(request, "partition", 0))


def _matches(message: dict, query: Query) -> bool:
    if query.key is not None and message["key"] != query.key:
        return False
    return query.time is None or (message["publishTime"] or 0) >= query.time


async def _read(handle, lo: int, hi: int, budget: Budget, decode) -> list[dict] | None:
    """The messages of offsets [lo, hi) in order; None when the budget ran out first."""
    out: list[dict] = []
    position = lo
    while position < hi:
        if budget.read <= 0:
            budget.exhausted = True
            return None
        try:
            result = await handle.fetch(position, hi, max_bytes=min(_FETCH_BYTES, budget.read))
        except OffsetOutOfRange:
            return out  # trimmed meanwhile
        if not result.entries:
            break
        budget.read -= sum(len(entry.data) for entry in result.entries)
        # Decompressing and decoding (Avro, JSON) up to a megabyte: off the event loop.
        decoded = await asyncio.to_thread(lambda entries: [m for e in entries for m in decode(e)], result.entries)
        out += [m for m in decoded if lo <= m["offset"] < hi]
        position = max(position, result.entries[-1].end_offset)
    return out


async def _partition(ctx, name: TopicName, index: int, query: Query, budget: Budget, versions) -> list[dict]:
    """The requested messages of one (partition) stream of this broker."""
    topic = await require_topic(ctx, name)
    handle = topic.handle
    await handle.refresh()
    start, end = handle.start_offset(), handle.next_offset()

    def decode(entry):
        return [m for m in decoding.messages(entry, topic.stream_id, index, versions) if _matches(m, query)]

    if query.mode == "latest":
        found: list[dict] = []
        hi, window = end, max(query.count, 64)
        while hi > start and len(found) < query.count:
            lo = max(start, hi - window)
            chunk = await _read(handle, lo, hi, budget, decode)
            if chunk is None:
                break
            found = chunk + found
            hi, window = lo, window * 2
        return found[-query.count:]
    position = query.offset if query.offset is not None else \
        await time_index.before(ctx.meta, topic.stream_id, query.time)
    position = max(position, start)
    found = []
    while position < end and len(found) < query.count:
        hi = min(end, position + max(query.count, 64))
        chunk = await _read(handle, position, hi, budget, decode)
        if chunk is None:
            break
        found += chunk
        position = hi
    return found[:query.count]


async def _forwarded(request: web.Request, owner, index: int) -> tuple[list[dict], bool]:
    url = owner.http_url + str(request.rel_url.update_query(partition=str(index)))
    headers = {"Accept": "application/json"}
    if "Authorization" in request.headers:
        headers["Authorization"] = request.headers["Authorization"]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT)) as session:
            async with session.get(url, headers=headers) as response:
                answer = await response.json()
                if response.status != 200:
                    raise AdminError(response.status, answer.get("reason", "the partition's broker refused"))
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise AdminError(502, f"The partition's broker did not answer: {exc}") from None
    return answer["messages"], answer["complete"]


async def get_messages(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request).base
    query = parse_query(request)
    streams = await partitions(ctx, name)
    partitioned = streams != [name]
    if query.partition is not None:
        if not partitioned or query.partition >= len(streams):
            raise AdminError(400, f"partition {query.partition} does not exist: the topic has "
                                  f"{len(streams) if partitioned else 'no'} partitions")
        chosen = [(query.partition, streams[query.partition])]
    else:
        chosen = list(enumerate(streams)) if partitioned else [(-1, name)]
    versions = decoding.Schemas(await schemas.history(ctx.meta, name))
    budget = Budget()
    found: list[dict] = []
    complete = True
    for index, stream in chosen:
        try:
            found += await _partition(ctx, stream, index, query, budget, versions)
        except NotOwner as exc:
            if exc.owner is None:
                raise
            messages, whole = await _forwarded(request, exc.owner, index)
            found += messages
            complete = complete and whole
    found.sort(key=lambda msg: (msg["publishTime"] or 0, msg["partition"], msg["offset"]))
    found = found[-query.count:] if query.mode == "latest" else found[:query.count]
    answered = []
    for message in found:
        budget.shown -= decoding.shown_bytes(message)
        if budget.shown < 0:
            budget.exhausted = True
            break
        answered.append(message)
    return web.json_response({
        "topic": str(name), "partitioned": partitioned, "mode": query.mode, "count": query.count, "key": query.key,
        "messages": answered, "complete": complete and not budget.exhausted,
        "readBytes": MAX_READ_BYTES - budget.read,
    })


__all__ = ["MAX_COUNT", "MAX_READ_BYTES", "MAX_SHOWN_BYTES", "get_messages", "parse_query"]
