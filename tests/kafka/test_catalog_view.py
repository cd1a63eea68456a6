"""The namespace's listing is kept between Metadata requests only while every change to it is heard."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from nereus.kafka.server.catalog.catalog import Catalog
from nereus.kafka.server.catalog.kept import MAX_PATCHED
from nereus.meta.api import NotificationType


class Membership:
    def __init__(self) -> None:
        self.watching = True
        self.subscriptions = 1
        self.listeners = []

    def on_note(self, prefix, listener) -> None:
        self.listeners.append((prefix, listener))

    def note(self, key: str, kind: NotificationType = NotificationType.KEY_MODIFIED) -> None:
        for prefix, listener in self.listeners:
            if key.startswith(prefix):
                listener(SimpleNamespace(key=key, type=kind))


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


def patching():
    """A reading of a listing (``read``) and its patch (``patch``), both counted."""
    state = {"reads": 0, "patches": []}

    async def read():
        state["reads"] += 1
        await asyncio.sleep(0)
        return {"whole": state["reads"]}

    async def patch(kept, changed):
        state["patches"].append(sorted(changed))
        await asyncio.sleep(0)
        return {**kept, **{topic: len(state["patches"]) for topic in changed}}
    return read, patch, state


async def test_a_change_naming_topics_patches_the_kept_answer():
    catalog, membership = Catalog(None, None, None, None), Membership()
    catalog.follow(membership)
    read, patch, state = patching()
    get = lambda: catalog.kept.get("x", read, patch)  # noqa: E731
    assert await get() == {"whole": 1}
    membership.note("/nereus/kafka/topic-configs/orders")
    membership.note("/nereus/streams/by-name/" + "persistent%3A%2F%2Fpublic%2Fdefault%2Fclicks-partition-3")
    membership.note("/nereus/pulsar/partitioned/persistent%3A%2F%2Fpublic%2Fdefault%2Fviews")
    membership.note("/nereus/pulsar/partitioned/persistent%3A%2F%2Fother%2Fns%2Felsewhere")  # not Kafka's
    assert await get() == {"whole": 1, "clicks": 1, "orders": 1, "views": 1}
    assert state == {"reads": 1, "patches": [["clicks", "orders", "views"]]}
    assert await get() == {"whole": 1, "clicks": 1, "orders": 1, "views": 1}  # kept as patched
    catalog.kept.changed("orders")  # what ``create`` / ``delete`` do here
    assert (await get())["orders"] == 2 and state["patches"][-1] == ["orders"]

    catalog.kept.changed()  # a change that names no topic
    assert await get() == {"whole": 2}
    membership.note("/nereus/kafka/topic-configs/a", NotificationType.KEY_RANGE_DELETED)
    assert await get() == {"whole": 3}
    for i in range(MAX_PATCHED + 1):  # too many to patch
        catalog.kept.changed(f"t{i}")
    assert await get() == {"whole": 4}
    membership.subscriptions += 1
    assert await get() == {"whole": 5}


async def test_a_change_heard_while_a_patch_is_read_is_patched_again():
    catalog, membership = Catalog(None, None, None, None), Membership()
    catalog.follow(membership)
    read, _, state = patching()
    release = asyncio.Event()
    patched = []

    async def slow_patch(kept, changed):
        patched.append(sorted(changed))
        await release.wait()
        return {**kept, **{topic: len(patched) for topic in changed}}

    assert await catalog.kept.get("x", read, slow_patch) == {"whole": 1}
    catalog.kept.changed("a")
    asking = asyncio.ensure_future(catalog.kept.get("x", read, slow_patch))
    await asyncio.sleep(0)
    catalog.kept.changed("b")  # heard while "a" is patched in
    release.set()
    assert await asking == {"whole": 1, "a": 1}
    assert await catalog.kept.get("x", read, slow_patch) == {"whole": 1, "a": 1, "b": 2}
    assert patched == [["a"], ["b"]] and state["reads"] == 1


async def _until(condition, what: str) -> None:
    """Let the loop run until ``condition()`` holds (no clock: the background work is a few turns)."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never: {what}")


async def test_an_answer_kept_current_is_patched_in_the_background():
    catalog, membership = Catalog(None, None, None, None), Membership()
    read, patch, state = patching()
    catalog.kept.keep_up_seconds = 0
    catalog.kept.keep_current("x", read, patch)  # asked before the notifications are followed
    await asyncio.sleep(0)
    assert state["reads"] == 0  # nothing can be kept yet
    catalog.follow(membership)
    await _until(lambda: state["reads"] == 1, "the answer read once followed")
    assert await catalog.kept.get("x", read, patch) == {"whole": 1}  # ready: no reading for the request

    membership.note("/nereus/kafka/topic-configs/orders")
    await _until(lambda: state["patches"] == [["orders"]], "the change patched in without a request")
    assert await catalog.kept.get("x", read, patch) == {"whole": 1, "orders": 1}
    assert state["reads"] == 1 and len(state["patches"]) == 1

    for topic in ("a", "b", "c"):  # a burst: patched together or one after the other, never lost
        catalog.kept.changed(topic)
    await _until(lambda: sorted(t for p in state["patches"][1:] for t in p) == ["a", "b", "c"], "the burst patched")
    assert (await catalog.kept.get("x", read, patch)).keys() == {"whole", "orders", "a", "b", "c"}

    membership.subscriptions += 1  # subscribed again: read whole at the next change
    catalog.kept.changed("d")
    await _until(lambda: state["reads"] == 2, "read whole after a new subscription")
    await catalog.close()  # the broker stops: nothing is read in the background any more
    done = (state["reads"], len(state["patches"]))
    catalog.kept.changed("e")
    for _ in range(100):
        await asyncio.sleep(0)
    assert (state["reads"], len(state["patches"])) == done


async def test_changes_heard_while_nothing_is_kept_hold_no_topic():
    """A broker no Kafka client asked keeps no answer: the topics it hears changed (every topic a
    Pulsar client creates) are not held, so their memory goes when they are unloaded."""
    catalog, membership = Catalog(None, None, None, None), Membership()
    catalog.follow(membership)
    for i in range(100):
        membership.note(f"/nereus/kafka/topic-configs/t{i}")
    assert not catalog.kept._touched
    compute, calls = counting()
    assert await catalog.kept.get("x", compute) == 1
    membership.note("/nereus/kafka/topic-configs/after")  # one answer kept now: patched for it
    assert set(catalog.kept._touched) == {"after"}
