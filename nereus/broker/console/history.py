"""The console's charts from the broker's memory: the last minutes of each loaded topic's traffic.

Every ``INTERVAL`` seconds (the pages' polling rate; samples fall on multiples of it
of the wall clock, so the samples of several brokers line up) the broker samples the
topics it has loaded: messages per second in and out (both protocols, as their stats
report them) and the backlog of their Pulsar subscriptions. It keeps ``CAPACITY``
samples (10 minutes) in a fixed ring per topic, so a chart opened now starts full.
Memory is bounded: at most ``MAX_TOPICS`` topics have a ring (a few KiB each); the
broker's totals cover every loaded topic. A topic's ring goes once it has been
unloaded for a whole window.

``GET /console/api/history`` gives the totals, ``GET /console/api/history/persistent/
{tenant}/{namespace}/{topic}`` one topic's series (a partitioned topic's partitions
summed), as ``{"intervalMs", "samples": [[time ms, in, out, backlog], ...]}``, oldest
first. In a cluster the broker asked gathers every live broker's own series
(``?local=true``) and sums them, sample time by sample time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from array import array

import aiohttp
from aiohttp import web

from ...pulsar.server.topics import ATTACHMENT as PULSAR
from ...topics.rates import combined_rates
from ..admin.common import context, flag, partitions, topic_name

log = logging.getLogger(__name__)

INTERVAL = 3.0
CAPACITY = 200
MAX_TOPICS = 1000
TOTAL = ""  # the ring of the broker's totals (no topic has an empty name)
_FIELDS = 3  # in, out, backlog
GATHER_TIMEOUT = 10.0


class History:
    """Rings of (in, out, backlog) samples per topic, all on one sample clock."""

    def __init__(self, capacity: int = CAPACITY, max_topics: int = MAX_TOPICS) -> None:
        self.capacity = capacity
        self.max_topics = max_topics
        self.ticks = 0  # samples recorded so far
        self._times = array("q", [0]) * capacity
        self._rings: dict[str, array] = {}
        self._last_seen: dict[str, int] = {}

    def record(self, time_ms: int, values: dict[str, tuple[float, float, float]]) -> None:
        """One sample: ``values`` per loaded topic; the totals are their sums."""
        slot = self.ticks % self.capacity
        self._times[slot] = time_ms
        totals = [0.0] * _FIELDS
        for sample in values.values():
            for i in range(_FIELDS):
                totals[i] += sample[i]
        self._write(TOTAL, slot, totals)
        for name in [n for n in self._rings if n != TOTAL and n not in values]:
            if self.ticks - self._last_seen[name] >= self.capacity:
                del self._rings[name], self._last_seen[name]
            else:
                self._write(name, slot, (0.0, 0.0, 0.0), seen=False)
        for name, sample in values.items():
            # A topic idle all along needs no ring (its series reads as zeros): rings go to the
            # topics with traffic, not to the first ``max_topics`` loaded.
            if name in self._rings or (any(sample) and len(self._rings) - 1 < self.max_topics):  # - 1: the totals
                self._write(name, slot, sample)
        self.ticks += 1

    def _write(self, name: str, slot: int, sample, *, seen: bool = True) -> None:
        ring = self._rings.get(name)
        if ring is None:
            ring = self._rings[name] = array("f", [0.0]) * (self.capacity * _FIELDS)  # 4-byte floats: a chart needs no more
        ring[slot * _FIELDS:(slot + 1) * _FIELDS] = array("f", sample)
        if seen:
            self._last_seen[name] = self.ticks

    def series(self, names: list[str] | None = None) -> list[list]:
        """``[[time ms, in, out, backlog], ...]`` oldest first: the totals, or the sum over ``names``
        (zeros for a topic without a ring: idle all along, or beyond ``max_topics``)."""
        rings = [self._rings[TOTAL]] if names is None and TOTAL in self._rings else \
            [self._rings[n] for n in names or () if n in self._rings]
        count = min(self.ticks, self.capacity)
        out = []
        for tick in range(self.ticks - count, self.ticks):
            slot = tick % self.capacity
            sums = [sum((r[slot * _FIELDS + i] for r in rings), 0.0) for i in range(_FIELDS)]
            out.append([self._times[slot], *sums])
        return out


HISTORY = web.AppKey("nereus_console_history", History)


def _backlog(core) -> float:
    """The summed backlog of the topic's loaded Pulsar subscriptions (no I/O: their cursors are in memory)."""
    pulsar = core.attachments.get(PULSAR)
    if pulsar is None:
        return 0.0
    end = pulsar.handle.next_offset()
    total = 0
    for dispatcher in pulsar.dispatchers.values():
        acks = dispatcher.sub.cursor.acks
        total += max(0, end - acks.acked_below - acks.acked_count_between(acks.acked_below, end))
    return float(total)


def _subscribed(core) -> bool:
    pulsar = core.attachments.get(PULSAR)
    return pulsar is not None and bool(pulsar.dispatchers)


def sample(registry) -> dict[str, tuple[float, float, float]]:
    """(in msg/s, out msg/s, backlog) of every topic loaded in ``registry`` that has any."""
    out = {}
    for name, core in list(registry.topics.items()):
        traffic = core.traffic
        if traffic.inbound.quiet and not traffic.outbound and not _subscribed(core):
            continue  # all zeros (most of many loaded topics are idle): read as an unloaded topic's
        rate_out, _ = combined_rates(list(traffic.outbound.values()))
        out[name] = (traffic.inbound.rates()[0], rate_out, _backlog(core))
    return out


async def run(app: web.Application, ctx, interval: float = INTERVAL) -> None:
    """Sample every ``interval`` seconds of the wall clock until cancelled."""
    history = app[HISTORY]
    step = int(interval * 1000)
    last = 0
    while True:
        at = max((int(time.time() * 1000) // step + 1) * step, last + step)  # the next boundary, each once
        await asyncio.sleep(max(0.0, at / 1000 - time.time()))
        last = at
        try:
            history.record(at, sample(ctx.pulsar.registry))
        except Exception:  # a topic unloading mid-sample: the next sample is whole again
            log.exception("sampling the console's series failed")


def _merge(answers: list[list[list]]) -> list[list]:
    summed: dict[int, list] = {}
    for samples in answers:
        for at, *values in samples:
            row = summed.setdefault(at, [at, 0.0, 0.0, 0.0])
            for i, v in enumerate(values):
                row[i + 1] += v
    return [summed[at] for at in sorted(summed)]


async def _gather(request: web.Request, ctx, local: list[list]) -> list[list]:
    """This broker's samples summed with every other live broker's own."""
    node = ctx.node
    others = [r.address.http_url for r in node.membership.brokers.values()
              if r.address.name != node.membership.name] if node is not None else []
    if not others:
        return local
    path = request.rel_url.update_query(local="true")

    async def ask(session, base: str) -> list[list]:
        try:
            async with session.get(base + str(path), headers={"Accept": "application/json"}) as response:
                if response.status == 200:
                    return (await response.json())["samples"]
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError) as exc:
            log.debug("console history of %s: %s", base, exc)
        return []  # a broker that does not answer adds nothing to the sums

    headers = {"Authorization": request.headers["Authorization"]} if "Authorization" in request.headers else None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=GATHER_TIMEOUT), headers=headers) as session:
        answers = await asyncio.gather(*(ask(session, base) for base in others))
    return _merge([local, *answers])


async def _answer(request: web.Request, names: list[str] | None) -> web.Response:
    ctx = context(request)
    samples = request.app[HISTORY].series(names)
    if not flag(request, "local"):
        samples = await _gather(request, ctx, samples)
    return web.json_response({"intervalMs": int(INTERVAL * 1000), "samples": samples})


async def get_totals(request: web.Request) -> web.Response:
    return await _answer(request, None)


async def get_topic(request: web.Request) -> web.Response:
    ctx = context(request)
    name = topic_name(request).base
    return await _answer(request, [str(p) for p in await partitions(ctx, name)])


__all__ = ["HISTORY", "History", "get_topic", "get_totals", "run", "sample"]
