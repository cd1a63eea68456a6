"""Cursor persistence and the subscription state machine, without a network."""

from __future__ import annotations

import asyncio

from nereus.ledger.cursor import Cursor, cursor_key, list_cursors
from nereus.ledger.subscription import ConsumerBusy, ConsumerSlot, Subscription, SubType
from nereus.meta import open_engine
from nereus.storage.records import stream_partition


async def test_cursor_persists_coalesced_and_reloads():
    async with open_engine(None, shards=2) as engine:
        meta = engine.client(namespace="default")
        cursor, created = await Cursor.open(meta, 7, "sub/a", initial=3)
        assert created and cursor.acks.acked_below == 3
        cursor.ack(5, 7)
        await asyncio.gather(*(cursor.persist() for _ in range(10)))
        cursor.ack_cumulative(3)
        await cursor.persist()
        assert not cursor.dirty
        again, created = await Cursor.open(meta, 7, "sub/a", initial=0)
        assert not created
        assert (again.acks.acked_below, again.acks.ranges) == (4, [(5, 7)])
        assert await list_cursors(meta, 7) == ["sub/a"]
        rec = await meta.get(cursor_key(7, "sub/a"), partition_key=stream_partition(7))
        assert rec is not None and rec.key.startswith(stream_partition(7) + "/cursor/")
        await again.delete()
        assert await list_cursors(meta, 7) == []
        await meta.close()


def _sub(sub_type=SubType.SHARED) -> Subscription:
    return Subscription("s", sub_type, Cursor.ephemeral(1, "s", initial=0))


def test_exclusive_and_type_conflicts():
    sub = _sub(SubType.EXCLUSIVE)
    sub.add(ConsumerSlot(1, "a", permits=10), SubType.EXCLUSIVE)
    for sub_type in (SubType.EXCLUSIVE, SubType.SHARED):
        try:
            sub.add(ConsumerSlot(2, "b"), sub_type)
        except ConsumerBusy:
            pass
        else:
            raise AssertionError(sub_type)


def test_redelivery_and_acks():
    sub = _sub()
    a = ConsumerSlot(1, "a", permits=100)
    sub.add(a, SubType.SHARED)
    for base, count in ((0, 1), (1, 3), (4, 1)):
        assert sub.choose() is a
        assert sub.dispatched(a, base, count) == 0
    sub.ack_entry(0, 1)
    sub.ack_offsets(1, [1, 2])  # a partly acked batch stays pending
    assert set(sub.pending) == {1, 4}
    assert sub.redeliver(a.token, [1, 4, 99]) == 2
    assert sub.replay == {1, 4} and sub.redeliveries == {1: 1, 4: 1}
    sub.ack_offsets(1, [3])
    assert sub.replay == {4}
    sub.remove(a.token)
    assert sub.backlog(5) == 1


def test_failover_elects_by_priority_and_name():
    sub = _sub(SubType.FAILOVER)
    notices = sub.add(ConsumerSlot(1, "b"), SubType.FAILOVER)
    assert [(s.name, active) for s, active in notices] == [("b", True)]
    notices = sub.add(ConsumerSlot(2, "a"), SubType.FAILOVER)
    assert [(s.name, active) for s, active in notices] == [("a", True), ("b", False)]


def test_key_shared_holds_a_key_until_acked():
    sub = _sub(SubType.KEY_SHARED)
    a = ConsumerSlot(1, "a", permits=100)
    sub.add(a, SubType.KEY_SHARED)
    sub.dispatched(a, 0, 1, key=42)
    b = ConsumerSlot(2, "b", permits=100)
    sub.add(b, SubType.KEY_SHARED)
    owner = sub._owner(42)
    if owner is b:  # key moved to b: b must wait until a acked its entry
        assert sub.choose(42) is None
        sub.ack_entry(0, 1)
        assert sub.choose(42) is b
    else:
        assert sub.choose(42) is a
