"""The group coordinator over the embedded metadata engine: conditional writes, failed writes, eviction.

Two ``Coordinator`` instances on two clients of one engine stand for two brokers
sharing a metadata plane. Time is a manual clock; waiting is on conditions.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from nereus.kafka.server.groups.members import (COMPLETING, EMPTY, GROUP_MAX_SIZE_REACHED, NON_EMPTY_GROUP, NONE,
                                                NOT_COORDINATOR, STABLE, GroupError, group_key)
from nereus.kafka.server.groups.coordinator import Coordinator
from nereus.kafka.server.groups.offsets import offset_key
from nereus.meta import MetadataUnavailable
from nereus.meta.embedded import Engine

COORDINATOR_NOT_AVAILABLE = 15


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FlakyMeta:
    """A metadata client whose puts fail where told (counted over put and put_many ops).

    Puts after the first failure wait for ``gate`` (set by default), so a test can look
    at the state between a failed write and its retry.
    """

    def __init__(self, inner, fail: dict[int, Exception]) -> None:
        self.inner = inner
        self.fail = fail
        self.puts = 0
        self.failures = 0
        self.gate = asyncio.Event()
        self.gate.set()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def _one(self, key, value, **kw):
        self.puts += 1
        exc = self.fail.get(self.puts)
        if exc is not None:
            self.failures += 1
            raise exc
        if self.failures:
            await self.gate.wait()
        return await self.inner.put(key, value, **kw)

    async def put(self, key, value, **kw):
        return await self._one(key, value, **kw)

    async def put_many(self, ops):
        out = []
        for op in ops:
            try:
                out.append(await self._one(op.key, op.value, expected_version_id=op.expected_version_id))
            except Exception as exc:
                out.append(exc)
        return out


async def done(awaitable, timeout: float = 10.0):
    """The result of ``awaitable``, failing the test instead of hanging if it never comes."""
    return await asyncio.wait_for(awaitable, timeout)


async def until(predicate, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


@pytest.fixture
async def engine():
    e = Engine(None, shards=2)
    try:
        yield e
    finally:
        await e.close()


@pytest.fixture
async def brokers(engine):
    """Two coordinators, each on its own client of the same metadata."""
    clients = [engine.client(), engine.client()]
    coords = [_coordinator(c) for c in clients]
    yield coords
    for coord in coords:
        await coord.stop()
    for c in clients:
        await c.close()


def _coordinator(meta, **kw) -> Coordinator:
    kw.setdefault("clock", Clock())
    return Coordinator(meta, initial_rebalance_delay=0, retry_backoff=(0.01, 0.05), **kw)


def _join(group, member_id: str = "", metadata: bytes = b"m", session: float = 100.0):
    return group.join(member_id, "client", "host", session, 5.0, "consumer", [("range", metadata)], None)


async def _stable_group(coord: Coordinator, group_id: str) -> tuple:
    """A group with one member, synced: (group, member id)."""
    group = await coord.group(group_id)
    joined = await done(_join(group))
    assert joined.error == NONE and joined.generation == group.generation
    code, assignment = await done(group.sync(joined.member_id, joined.generation, {joined.member_id: b"a"}))
    assert (code, assignment) == (NONE, b"a") and group.state == STABLE
    return group, joined.member_id


async def _stored(meta, key: str):
    rec = await meta.get(key)
    return None if rec is None else json.loads(rec.value)


async def _commit(coord: Coordinator, group_id: str, member: str, generation: int, offset: int, topic="t", p=0):
    group = await coord.group(group_id)
    code = group.check_commit(member, generation)
    if code != NONE:
        return code
    codes = await done(coord.commit_offsets(group, {(topic, p): (offset, -1, None)}, member_commit=generation >= 0))
    return codes[(topic, p)]


# -- conflicts: another broker wrote behind this one's back ----------------------------------------
async def test_group_written_elsewhere_is_lost_then_reloaded(brokers):
    a, b = brokers
    group_a, member = await _stable_group(a, "g")
    # The other broker loads the group and writes it (the member leaves there: generation 2, Empty).
    group_b = await b.group("g")
    assert group_b.generation == 1 and group_b.state == STABLE
    assert group_b.leave(member) == NONE
    await done(b.durable(group_b))
    written_by_b = await _stored(a.meta, group_key("g"))
    assert (written_by_b["generation"], written_by_b["state"], written_by_b["members"]) == (2, EMPTY, [])
    # This broker still holds generation 1; the member rejoins with new metadata: a rebalance to
    # generation 2 whose write must not replace the other broker's record.
    result = await done(_join(group_a, member, metadata=b"changed"))
    assert result.error == NOT_COORDINATOR
    assert await _stored(a.meta, group_key("g")) == written_by_b  # no lost update
    assert a.groups.get("g") is not group_a
    reloaded = await a.group("g")
    assert reloaded is not group_a and (reloaded.generation, reloaded.state, reloaded.members) == (2, EMPTY, {})
    # The reloaded copy carries the current version: its next write succeeds.
    again = await done(_join(reloaded))
    assert again.error == NONE and again.generation == 3
    assert (await _stored(a.meta, group_key("g")))["generation"] == 3


async def test_stale_coordinator_cannot_commit_for_a_group_taken_over(brokers):
    a, b = brokers
    group_a, member = await _stable_group(a, "g")
    assert await _commit(a, "g", member, 1, 5) == NONE
    group_b = await b.group("g")
    group_b.leave(member)
    newcomer = await done(_join(group_b))
    assert newcomer.error == NONE and newcomer.generation == 3
    await done(group_b.sync(newcomer.member_id, 3, {newcomer.member_id: b"x"}))
    assert await _commit(b, "g", newcomer.member_id, 3, 9) == NONE
    # The first broker's member still looks valid there (generation 1), but the group moved on.
    assert await _commit(a, "g", member, 1, 6) == NOT_COORDINATOR
    assert (await _stored(a.meta, offset_key("g", "t", 0)))["offset"] == 9
    reloaded = await a.group("g")
    assert reloaded is not group_a and reloaded.generation == 3
    assert group_a.check_commit(member, 1) == NOT_COORDINATOR


async def test_offset_written_elsewhere_is_detected_and_not_blindly_replaced(brokers, caplog):
    a, b = brokers
    _group_a, member = await _stable_group(a, "g")
    assert await _commit(a, "g", member, 1, 5) == NONE
    # The other broker holds the same (current) generation and commits behind this one's back.
    assert await _commit(b, "g", member, 1, 7) == NONE
    version_after_b = (await a.meta.get(offset_key("g", "t", 0))).version.version_id
    with caplog.at_level(logging.WARNING, logger="nereus.kafka.server.groups.offsets"):
        # This broker's known version is stale: the write conflicts, the group is checked (still
        # the generation this broker validated against), the offset re-read and the commit retried.
        assert await _commit(a, "g", member, 1, 8) == NONE
    assert any("committed elsewhere" in r.message and "'offset': 7" in r.message for r in caplog.records)
    rec = await a.meta.get(offset_key("g", "t", 0))
    assert json.loads(rec.value)["offset"] == 8 and rec.version.version_id > version_after_b


async def test_concurrent_first_commits_of_two_brokers_both_conditional(brokers):
    a, b = brokers
    for coord in (a, b):
        await coord.group("simple")
    # Neither broker has seen the record: both write "must not exist"; one loses the race and
    # only writes again after reading what the other wrote.
    results = await asyncio.gather(_commit(a, "simple", "", -1, 1), _commit(b, "simple", "", -1, 2))
    assert results == [NONE, NONE]
    final = (await _stored(a.meta, offset_key("simple", "t", 0)))["offset"]
    assert final in (1, 2)
    version = (await a.meta.get(offset_key("simple", "t", 0))).version.version_id
    for coord in (a, b):
        group = await coord.group("simple")
        assert group.record.offsets[("t", 0)] <= version


# -- failed writes stay pending and are retried ---------------------------------------------------
async def test_join_is_answered_only_after_the_failed_write_is_retried(engine):
    meta = FlakyMeta(engine.client(), {1: MetadataUnavailable("injected")})
    coord = _coordinator(meta)
    group = await coord.group("g")
    meta.gate.clear()
    fut = _join(group)
    await until(lambda: meta.puts >= 2)  # failed once; the retry waits at the gate
    assert not fut.done() and group.state == COMPLETING
    assert await meta.inner.get(group_key("g")) is None
    meta.gate.set()
    result = await done(fut)
    assert result.error == NONE and result.generation == 1
    assert (await _stored(meta.inner, group_key("g")))["generation"] == 1
    await coord.stop()


async def test_sync_is_answered_only_after_the_failed_write_is_retried(engine, caplog):
    meta = FlakyMeta(engine.client(), {2: RuntimeError("injected bug")})
    coord = _coordinator(meta)
    group = await coord.group("g")
    joined = await done(_join(group))
    meta.gate.clear()
    with caplog.at_level(logging.WARNING, logger="nereus.kafka.server.groups.coordinator"):
        fut = group.sync(joined.member_id, 1, {joined.member_id: b"a"})
        await until(lambda: meta.puts >= 3)
    assert any("writing its state failed (injected bug)" in r.message for r in caplog.records)
    assert not fut.done() and (await _stored(meta.inner, group_key("g")))["state"] == COMPLETING
    meta.gate.set()
    assert await done(fut) == (NONE, b"a")
    stored = await _stored(meta.inner, group_key("g"))
    assert stored["state"] == STABLE and stored["members"][0]["assignment"] == "YQ=="
    await coord.stop()


async def test_failed_background_write_stays_pending_until_written(engine):
    meta = FlakyMeta(engine.client(), {3: MetadataUnavailable("injected"), 4: MetadataUnavailable("again")})
    coord = _coordinator(meta)
    group, member = await _stable_group(coord, "g")
    assert group.leave(member) == NONE  # Empty: written in the background, failing twice
    assert not group.record.settled
    await done(coord.durable(group))
    assert meta.failures == 2 and group.record.settled
    assert (await _stored(meta.inner, group_key("g")))["state"] == EMPTY
    await coord.stop()


async def test_failed_offset_commit_is_not_acknowledged(engine):
    meta = FlakyMeta(engine.client(), {1: MetadataUnavailable("injected")})
    coord = _coordinator(meta)
    await coord.group("simple")
    assert await _commit(coord, "simple", "", -1, 4) == COORDINATOR_NOT_AVAILABLE
    assert await meta.inner.get(offset_key("simple", "t", 0)) is None
    assert await _commit(coord, "simple", "", -1, 5) == NONE
    assert (await _stored(meta.inner, offset_key("simple", "t", 0)))["offset"] == 5
    await coord.stop()


# -- bounded memory ------------------------------------------------------------------------------
async def test_many_groups_touched_stay_bounded_in_memory(engine):
    clock = Clock()
    meta = engine.client()
    coord = _coordinator(meta, clock=clock, idle_seconds=60.0, max_groups=500)
    busy, member = await _stable_group(coord, "busy")
    assert await _commit(coord, "busy", member, 1, 3) == NONE
    await coord.group("kept")
    assert await _commit(coord, "kept", "", -1, 11) == NONE
    peak = 0
    for i in range(100_000):
        await coord.group(f"g{i}")
        if i % 1000 == 0:
            await coord.group("busy")  # in use: the most recently used end
            peak = max(peak, len(coord.groups))
    peak = max(peak, len(coord.groups))
    assert peak <= 500 and not coord._loading
    assert coord.groups.get("busy") is busy and "kept" not in coord.groups
    # Idle ones go after the idle period; a group with a live member stays.
    clock.advance(61)
    coord.expire()
    assert list(coord.groups) == ["busy"]
    # Dropped groups come back from metadata.
    assert (await coord.fetch_offsets("kept"))[("t", 0)]["offset"] == 11
    assert await _commit(coord, "kept", "", -1, 12) == NONE
    assert (await _stored(meta, offset_key("kept", "t", 0)))["offset"] == 12
    await coord.stop()
    await meta.close()


async def test_evicted_group_reloads_its_state(engine):
    clock = Clock()
    meta = engine.client()
    coord = _coordinator(meta, clock=clock, idle_seconds=10.0)
    group, member = await _stable_group(coord, "g")
    group.leave(member)
    await done(coord.durable(group))
    clock.advance(11)
    coord.expire()
    assert "g" not in coord.groups
    reloaded = await coord.group("g")
    assert reloaded is not group and (reloaded.generation, reloaded.state) == (2, EMPTY)
    joined = await done(_join(reloaded))
    assert joined.generation == 3  # written with the version read at reload: no conflict
    await coord.stop()
    await meta.close()


async def test_members_of_a_group_are_capped(engine):
    meta = engine.client()
    coord = _coordinator(meta, max_group_size=3)
    group = await coord.group("g")
    first = await done(_join(group))
    pending = [_join(group) for _ in range(2)]  # new members: a rebalance waits for the first to rejoin
    with pytest.raises(GroupError) as exc:
        _join(group)
    assert exc.value.code == GROUP_MAX_SIZE_REACHED and len(group.members) == 3
    pending.append(_join(group, first.member_id))  # a known member still rejoins
    results = await done(asyncio.gather(*pending))
    assert {r.error for r in results} == {NONE} and {r.generation for r in results} == {2}
    await coord.stop()
    await meta.close()


async def test_a_session_ends_at_its_deadline_for_describe_and_delete(engine):
    """DeleteGroups right after a member's session ran out finds the group empty, whenever the
    background expiry pass runs next (a Kafka coordinator's session timers fire at the deadline)."""
    clock = Clock()
    meta = engine.client()
    coord = _coordinator(meta, clock=clock)
    group = await coord.group("g")
    joined = await done(_join(group, session=6.0))
    await done(group.sync(joined.member_id, joined.generation, {joined.member_id: b"a"}))
    clock.advance(5.9)
    assert await coord.delete_group("g") == NON_EMPTY_GROUP
    assert group.heartbeat(joined.member_id, joined.generation) == NONE  # the session starts again
    clock.advance(6.1)
    assert await coord.delete_group("g") == NONE
    assert await coord.group_now("g") is None
    await coord.stop()
    await meta.close()
