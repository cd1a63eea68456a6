"""Subscriptions of a topic: list, create at a position, delete, reset cursor, skip.

Changes go through the loaded topic's dispatcher, so connected consumers see them
at once: a reset disconnects the subscription's consumers (they resubscribe at the
new position, as with Pulsar's reset-cursor), a skip acknowledges the next
messages as a cumulative ack would. Creating a subscription creates its topic
if needed (in an existing namespace). On a partitioned topic, list/create/delete and
reset by time apply to every partition (as Pulsar's admin does).
"""

from __future__ import annotations

from aiohttp import web

from ...ledger.errors import CursorFenced
from ...ledger.subscription import SubType
from ...pulsar.server import positions
from .common import (AdminContext, AdminError, body, context, flag, no_content, partitions, require_namespace,
                     require_topic, topic_name)
from .topics import close_consumers

_INT64_MAX = (1 << 63) - 1


async def _names(topic) -> list[str]:
    return await topic.subscription_names()


async def _dispatcher(topic, sub: str):
    """The dispatcher of an existing subscription (loading a durable one); 404 if there is none."""
    dispatcher = topic.dispatchers.get(sub)
    if dispatcher is not None:
        return dispatcher
    if sub not in await _names(topic):
        raise AdminError(404, "Subscription not found")
    return await topic.subscription(sub, SubType.EXCLUSIVE, durable=True, initial=topic.handle.start_offset())


async def _topics(ctx: AdminContext, request: web.Request, *, single: str | None = None,
                  create: bool = False) -> list:
    name = topic_name(request)
    parts = await partitions(ctx, name)
    if single is not None and (len(parts) > 1 or parts[0] != name):
        raise AdminError(405, f"{single} is not allowed on a partitioned topic")
    if create:  # as with Pulsar's topic auto-creation, in an existing namespace
        await require_namespace(ctx.meta, name.tenant, name.namespace)
        return [await ctx.pulsar.get_topic(part) for part in parts]
    return [await require_topic(ctx, part) for part in parts]


def _position(topic, mid) -> int:
    """Offset of the first message delivered after a create/reset at message id ``mid``."""
    if mid is None or mid == "latest":
        return topic.handle.next_offset()
    if mid == "earliest":
        return topic.handle.start_offset()
    if not isinstance(mid, dict):
        raise AdminError(400, "The position must be a message id object")
    try:
        ledger, entry = int(mid.get("ledgerId", -1)), int(mid.get("entryId", -1))
        batch = int(mid.get("batchIndex", -1))
    except (TypeError, ValueError):
        raise AdminError(400, "ledgerId and entryId must be integers") from None
    if ledger < 0 or entry < 0:
        return topic.handle.start_offset()
    if ledger >= _INT64_MAX or entry >= _INT64_MAX:
        return topic.handle.next_offset()
    position = entry + max(0, batch)
    return min(max(position, topic.handle.start_offset()), topic.handle.next_offset())


async def _persist(topic, sub: str, dispatcher) -> None:
    """Write the moved cursor. A concurrent request that deleted or moved the subscription
    meanwhile fenced this copy (which the topic then drops): 404 or 409, not a 500."""
    try:
        await dispatcher.sub.cursor.persist()
    except CursorFenced:
        if sub not in await _names(topic):
            raise AdminError(404, "Subscription not found") from None
        raise AdminError(409, "The subscription was changed by another request; try again") from None


async def reset(topic, sub: str, position: int) -> None:
    """Move a subscription; its consumers are disconnected and come back at ``position``."""
    dispatcher = await _dispatcher(topic, sub)
    close_consumers(dispatcher)
    dispatcher.reset(position)
    await _persist(topic, sub, dispatcher)


# -- handlers -----------------------------------------------------------------------------
async def list_subscriptions(request: web.Request) -> web.Response:
    ctx = context(request)
    names: set[str] = set()
    for topic in await _topics(ctx, request):
        names.update(await _names(topic))
    return web.json_response(sorted(names))


async def create_subscription(request: web.Request) -> web.Response:
    ctx = context(request)
    sub = request.match_info["subscription"]
    mid = await body(request)
    topics = await _topics(ctx, request, create=True)
    for topic in topics:
        if sub in await _names(topic):
            raise AdminError(409, "Subscription already exists for topic")
    for topic in topics:
        await topic.handle.refresh()
        await topic.subscription(sub, SubType.EXCLUSIVE, durable=True, initial=_position(topic, mid))
    return no_content()


async def delete_subscription(request: web.Request) -> web.Response:
    ctx = context(request)
    sub = request.match_info["subscription"]
    topics = await _topics(ctx, request)
    found = [t for t in topics if sub in t.dispatchers or sub in await _names(t)]
    if not found:
        raise AdminError(404, "Subscription not found")
    force = flag(request, "force")
    for topic in found:
        dispatcher = topic.dispatchers.get(sub)
        if dispatcher is not None and dispatcher.sub.consumers and not force:
            raise AdminError(412, "Subscription has active connected consumers")
    for topic in found:
        dispatcher = await _dispatcher(topic, sub)
        close_consumers(dispatcher)
        await topic.drop_subscription(sub)
    return no_content()


async def reset_by_time(request: web.Request) -> web.Response:
    ctx = context(request)
    sub = request.match_info["subscription"]
    try:
        timestamp = int(request.match_info["timestamp"])
    except ValueError:
        raise AdminError(400, "The timestamp must be milliseconds since the epoch") from None
    topics = await _topics(ctx, request)
    for topic in topics:
        await _dispatcher(topic, sub)  # 404 before anything moves
    for topic in topics:
        await topic.handle.refresh()
        await reset(topic, sub, await positions.by_publish_time(topic, timestamp))
    return no_content()


async def reset_by_id(request: web.Request) -> web.Response:
    ctx = context(request)
    sub = request.match_info["subscription"]
    mid = await body(request)
    if not isinstance(mid, dict):
        raise AdminError(400, "The body must be a message id: {\"ledgerId\": .., \"entryId\": ..}")
    [topic] = await _topics(ctx, request, single="Reset-cursor at a message id")
    await topic.handle.refresh()
    position = _position(topic, mid)
    if mid.get("isExcluded") and position < topic.handle.next_offset():
        size = await positions.entry_at(topic, position)
        position += size or 1
    await reset(topic, sub, position)
    return no_content()


async def skip(request: web.Request) -> web.Response:
    ctx = context(request)
    sub = request.match_info["subscription"]
    try:
        count = int(request.match_info["count"])
    except ValueError:
        raise AdminError(400, "The number of messages must be an integer") from None
    if count < 0:
        raise AdminError(400, "The number of messages must not be negative")
    [topic] = await _topics(ctx, request, single="Skipping messages")
    dispatcher = await _dispatcher(topic, sub)
    await topic.handle.refresh()
    _skip(dispatcher, topic.handle.next_offset(), count)
    await _persist(topic, sub, dispatcher)
    return no_content()


async def skip_all(request: web.Request) -> web.Response:
    ctx = context(request)
    sub = request.match_info["subscription"]
    for topic in await _topics(ctx, request):
        dispatcher = await _dispatcher(topic, sub)
        await topic.handle.refresh()
        _skip(dispatcher, topic.handle.next_offset(), None)
        await _persist(topic, sub, dispatcher)
    return no_content()


def _skip(dispatcher, end: int, count: int | None) -> None:
    """Acknowledge the first ``count`` unacknowledged messages below ``end`` (all if None)."""
    sub = dispatcher.sub
    acks = sub.cursor.acks
    lo = acks.acked_below
    if count is None or sub.backlog(end) <= count:
        target = end
    else:
        # The smallest t with `count` unacknowledged offsets in [lo, t): a binary search.
        hi, target = end, end
        low = lo
        while low < hi:
            mid = (low + hi) // 2
            unacked = (mid - lo) - acks.acked_count_between(lo, mid)
            if unacked >= count:
                hi = target = mid
            else:
                low = mid + 1
    if target > lo:
        sub.ack_cumulative(target - 1)
        dispatcher.wake()


def add_routes(router: web.UrlDispatcher) -> None:
    t = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    s = t + "/subscription/{subscription}"
    router.add_get(t + "/subscriptions", list_subscriptions)
    router.add_put(s, create_subscription)
    router.add_delete(s, delete_subscription)
    router.add_post(s + "/resetcursor/{timestamp}", reset_by_time)
    router.add_post(s + "/resetcursor", reset_by_id)
    router.add_post(s + "/skip/{count}", skip)
    router.add_post(s + "/skip_all", skip_all)
