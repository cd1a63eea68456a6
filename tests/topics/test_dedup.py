"""Deduplication state: snapshots by compare-and-set, producers that expire."""

from __future__ import annotations

import json

import pytest

from nereus.topics import dedup as dedup_module
from nereus.topics.dedup import Dedup, snapshot_key


class FakeHandle:
    """Just what ``Dedup.restore`` asks of a stream handle (an empty stream, read only)."""

    writable = False
    fencing_token = None
    created = False  # opened, not created: its snapshot is read

    async def refresh(self) -> None:
        pass

    def start_offset(self) -> int:
        return 0

    def next_offset(self) -> int:
        return 0


@pytest.fixture
def meta(memory_meta):
    return memory_meta


async def test_a_snapshot_written_elsewhere_is_not_overwritten(meta):
    ours, theirs = Dedup(meta, 7), Dedup(meta, 7)
    await ours.restore(FakeHandle())
    await theirs.restore(FakeHandle())
    theirs.committed("p", 5, 1)
    theirs._since_snapshot = 1
    await theirs.snapshot()  # another broker took the stream and snapshotted
    ours.committed("p", 3, 1)
    await ours.snapshot()  # a stale owner: must not replace the newer state
    rec = await meta.get(snapshot_key(7), partition_key="/nereus/s/00000000000000000007")
    assert json.loads(rec.value)["seq"] == {"p": 5}
    await ours.restore(FakeHandle())  # it re-reads the truth before its next use
    assert ours.persisted["p"] == 5


async def test_inactive_producers_expire_and_the_count_is_capped(meta, monkeypatch):
    now = [1_000.0]
    state = Dedup(meta, 8, clock=lambda: now[0])
    await state.restore(FakeHandle())
    for i in range(100):
        state.committed(f"p{i}", i, i + 1)
    now[0] += dedup_module.PRODUCER_EXPIRY_MS / 1000 - 1
    state.committed("fresh", 1, 101)
    now[0] += 2  # p0..p99 are now idle past the expiry, "fresh" is not
    assert state.expire() == 100
    assert set(state.persisted) == {"fresh"}
    monkeypatch.setattr(dedup_module, "MAX_PRODUCERS", 10)
    for i in range(50):
        now[0] += 1
        state.committed(f"q{i}", i, 200 + i)
    state.expire()
    assert len(state.persisted) == 10 and "q49" in state.persisted and "fresh" not in state.persisted
