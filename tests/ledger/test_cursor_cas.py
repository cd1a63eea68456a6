"""A durable cursor is written by compare-and-set on the version it last read or wrote.

Two ``Cursor`` copies of one subscription over one metadata engine stand for two
brokers: whoever writes behind the other's back fences the other's copy, and
nothing either of them wrote is lost.
"""

import asyncio
import json

import pytest

from nereus.ledger.cursor import SPILL_RANGES, Cursor, cursor_key
from nereus.ledger.errors import CursorFenced
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.objstore.errors import ObjectNotFound
from nereus.storage.records import stream_partition

STREAM = 3


@pytest.fixture
async def brokers():
    """Two metadata clients of one engine (two brokers sharing the metadata plane)."""
    engine = open_engine(None, shards=4)
    first, second = engine.client(namespace="default"), engine.client(namespace="default")
    yield first, second
    await first.close()
    await second.close()
    await engine.close()


async def _record(meta) -> dict:
    rec = await meta.get(cursor_key(STREAM, "sub"), partition_key=stream_partition(STREAM))
    return json.loads(rec.value)


async def test_a_write_behind_a_copys_back_fences_it_and_loses_nothing(brokers):
    meta_a, meta_b = brokers
    a, created = await Cursor.open(meta_a, STREAM, "sub", initial=0)
    b, _ = await Cursor.open(meta_b, STREAM, "sub", initial=0)
    assert created
    fenced = []
    b.on_fenced = fenced.append

    a.ack(0, 10)
    await a.persist()
    b.ack(20, 30)
    with pytest.raises(CursorFenced):
        await b.persist()
    assert b.fenced and not b.dirty and len(fenced) == 1
    with pytest.raises(CursorFenced):  # fenced for good: no later write either
        b.ack(30, 40)
        await b.persist()
    assert len(fenced) == 1
    assert (await _record(meta_a))["acks"]["below"] == 10  # a's acks stand

    # b's owner reloads and reapplies: both writers' acks are in the record
    reloaded, created = await Cursor.open(meta_b, STREAM, "sub", initial=0)
    assert not created and reloaded.acks.acked_below == 10
    reloaded.ack(20, 30)
    await reloaded.persist()
    final, _ = await Cursor.open(meta_a, STREAM, "sub", initial=0)
    assert final.acks.is_acked(5) and final.acks.is_acked(25) and not final.acks.is_acked(15)

    # and now a's copy is the stale one
    a.ack(10, 20)
    with pytest.raises(CursorFenced):
        await a.persist()


async def test_racing_creates_make_one_cursor(brokers):
    meta_a, meta_b = brokers
    (a, created_a), (b, created_b) = await asyncio.gather(
        Cursor.open(meta_a, STREAM, "sub", initial=4), Cursor.open(meta_b, STREAM, "sub", initial=9))
    assert sorted([created_a, created_b]) == [False, True]
    winner, loser = (a, b) if created_a else (b, a)
    assert loser.acks.acked_below == winner.acks.acked_below  # the loser loaded the winner's record
    loser.ack(20, 21)
    await loser.persist()  # the loaded copy carries the record's version
    winner.ack(30, 31)
    with pytest.raises(CursorFenced):
        await winner.persist()


async def test_a_cursor_deleted_elsewhere_fences_the_copy(brokers):
    meta_a, meta_b = brokers
    a, _ = await Cursor.open(meta_a, STREAM, "sub", initial=0)
    b, _ = await Cursor.open(meta_b, STREAM, "sub", initial=0)
    await b.delete()  # unsubscribed through the other broker
    a.ack(0, 1)
    with pytest.raises(CursorFenced):
        await a.persist()  # must not bring the subscription back
    assert await meta_a.get(cursor_key(STREAM, "sub"), partition_key=stream_partition(STREAM)) is None


class RecordingStore:
    """An object store that remembers every key put (to catch a name written twice)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.puts: list[str] = []

    async def put_if_absent(self, key, data):
        self.puts.append(key)
        return await self.inner.put_if_absent(key, data)

    def __getattr__(self, name):
        return getattr(self.inner, name)


async def _exists(objects, key) -> bool:
    try:
        await objects.head(key)
        return True
    except ObjectNotFound:
        return False


def _scatter(cursor: Cursor, first: int) -> None:
    """Acks of every other offset from ``first``: enough ranges to spill."""
    for offset in range(first, first + 4 * SPILL_RANGES, 2):
        cursor.ack(offset, offset + 1)


async def test_racing_spills_never_write_an_object_name_twice(brokers):
    meta_a, meta_b = brokers
    objects = RecordingStore(open_object_store("memory://"))
    a, _ = await Cursor.open(meta_a, STREAM, "sub", initial=0, objects=objects)
    _scatter(a, 1)
    await a.persist()
    first = (await _record(meta_a))["snapshot"]

    # both copies now hold generation 1 and spill generation 2 of the snapshot
    b, _ = await Cursor.open(meta_b, STREAM, "sub", initial=0, objects=objects)
    _scatter(a, 10_001)
    await a.persist()
    _scatter(b, 20_001)
    with pytest.raises(CursorFenced):
        await b.persist()

    assert len(objects.puts) == len(set(objects.puts)) == 3
    record = await _record(meta_a)
    assert record["snapshot"] == objects.puts[1] and record["gen"] == 2
    assert not await _exists(objects, first)  # replaced by a committed record: released
    assert not await _exists(objects, objects.puts[2])  # the losing write's object: released
    reloaded, _ = await Cursor.open(meta_b, STREAM, "sub", initial=0, objects=objects)
    assert reloaded.acks == a.acks and reloaded.acks.is_acked(10_001) and not reloaded.acks.is_acked(20_001)

    # later spills keep taking fresh names; the one the record names always exists
    for first_offset in (30_001, 40_001):
        _scatter(reloaded, first_offset)
        await reloaded.persist()
        named = (await _record(meta_b))["snapshot"]
        assert await _exists(objects, named)
    assert len(objects.puts) == len(set(objects.puts)) == 5
