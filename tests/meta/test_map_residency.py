"""The embedded engine keeps the part of its LMDB map mapped in the process under a budget."""

from __future__ import annotations

import asyncio
import sys

import pytest

from nereus.meta import open_engine
from nereus.meta.embedded.residency import mapped_bytes
from tests.waiting import wait_until

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")

_RECORDS = 6000
_VALUE = 700  # ~4 MiB of records: many more pages than the budget below


def _value(i: int) -> bytes:
    return (b"%06d" % i) * (_VALUE // 6)


async def _write_and_read_all(engine) -> None:
    c = engine.client()
    for start in range(0, _RECORDS, 500):
        await asyncio.gather(*(c.put(f"/r/{i:06d}", _value(i)) for i in range(start, start + 500)))
    for start in range(0, _RECORDS, 100):  # a batch of 100 reads maps ~80 KiB of pages
        got = await asyncio.gather(*(c.get(f"/r/{i:06d}") for i in range(start, start + 100)))
        assert [r.value for r in got] == [_value(i) for i in range(start, start + 100)]


def _resident(engine) -> int:
    found = mapped_bytes(engine.namespace().shards[0].residency.path)
    assert found is not None
    return found[2]


async def test_pages_read_past_the_budget_are_dropped_from_the_process_and_read_back_intact(tmp_path):
    budget = 256 << 10
    async with open_engine(str(tmp_path), shards=1, resident_map_budget=budget,
                           resident_map_interval=0.0) as engine:
        await _write_and_read_all(engine)  # the check runs after every batch, and after reads
        shard = engine.namespace().shards[0]
        assert shard.residency.trims > 0
        # Point reads map pages without a batch: the idle shard thread checks after them too.
        await asyncio.to_thread(wait_until, lambda: _resident(engine) <= budget, "the mapped pages dropped", 10)
        c = engine.client()
        some = range(0, _RECORDS, 7)  # dropped pages come back from the page cache, unchanged
        got = await asyncio.gather(*(c.get(f"/r/{i:06d}") for i in some))
        assert [r.value for r in got] == [_value(i) for i in some]


async def test_pages_mapped_by_reads_alone_are_dropped_by_the_idle_shard(tmp_path):
    budget = 256 << 10
    async with open_engine(str(tmp_path), shards=1, resident_map_budget=budget,
                           resident_map_interval=0.2) as engine:
        c = engine.client()
        for start in range(0, _RECORDS, 500):
            await asyncio.gather(*(c.put(f"/r/{i:06d}", _value(i)) for i in range(start, start + 500)))
        shard = engine.namespace().shards[0]
        await asyncio.to_thread(wait_until, lambda: _resident(engine) <= budget, "the mapped pages dropped", 10)
        trims = shard.residency.trims
        for start in range(0, _RECORDS, 100):  # reads only: no batch wakes the shard thread
            got = await asyncio.gather(*(c.get(f"/r/{i:06d}") for i in range(start, start + 100)))
            assert [r.value for r in got] == [_value(i) for i in range(start, start + 100)]
        await asyncio.to_thread(wait_until, lambda: shard.residency.trims > trims and _resident(engine) <= budget, "the mapped pages dropped", 10)


async def test_without_a_budget_every_page_read_stays_mapped(tmp_path):
    async with open_engine(str(tmp_path), shards=1, resident_map_budget=0) as engine:
        await _write_and_read_all(engine)
        assert engine.namespace().shards[0].residency.trims == 0
        assert _resident(engine) > 2 << 20
