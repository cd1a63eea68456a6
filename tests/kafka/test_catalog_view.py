"""The namespace's listing is kept between Metadata requests only while every change to it is heard."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from nereus.kafka.server.catalog.catalog import Catalog


class Membership:
    def __init__(self) -> None:
        self.watching = True
        self.subscriptions = 1
        self.listeners = []

    def on_note(self, prefix, listener) -> None:
        self.listeners.append((prefix, listener))

    def note(self, key: str) -> None:
        for prefix, listener in self.listeners:
            if key.startswith(prefix):
                listener(SimpleNamespace(key=key))


def counting():
    calls = []

    async def compute():
        calls.append(None)
        await asyncio.sleep(0)
        return len(calls)
    return compute, calls


async def test_kept_until_a_change_is_heard_or_made():
    catalog, membership = Catalog(None, None, None, None), Membership()
    compute, calls = counting()
    assert await catalog.kept.get("x", compute) == 1  # not following yet: read each time
    assert await catalog.kept.get("x", compute) == 2
    catalog.follow(membership)
    assert {prefix for prefix, _ in membership.listeners} >= {"/nereus/kafka/topic-configs/"}
    assert await catalog.kept.get("x", compute) == 3
    assert await catalog.kept.get("x", compute) == 3  # kept
    membership.note("/nereus/kafka/topic-configs/t")
    assert await catalog.kept.get("x", compute) == 4
    membership.note("/somewhere/else")
    assert await catalog.kept.get("x", compute) == 4
    catalog.kept.changed()  # what ``create`` / ``delete`` do here
    assert await catalog.kept.get("x", compute) == 5
    membership.subscriptions += 1  # subscribed again: changes in between were not heard
    assert await catalog.kept.get("x", compute) == 6
    membership.watching = False
    assert await catalog.kept.get("x", compute) == 7
    assert await catalog.kept.get("x", compute) == 8


async def test_concurrent_askers_share_one_reading_and_one_changed_meanwhile_is_not_kept():
    catalog, membership = Catalog(None, None, None, None), Membership()
    catalog.follow(membership)
    release = asyncio.Event()
    calls = []

    async def slow():
        calls.append(None)
        await release.wait()
        return len(calls)

    askers = [asyncio.ensure_future(catalog.kept.get("x", slow)) for _ in range(5)]
    await asyncio.sleep(0)
    membership.note("/nereus/kafka/topic-configs/t")  # heard while it is read
    release.set()
    assert await asyncio.gather(*askers) == [1] * 5 and len(calls) == 1
    assert await catalog.kept.get("x", slow) == 2  # the reading may have missed the change: not kept
    assert await catalog.kept.get("x", slow) == 2
