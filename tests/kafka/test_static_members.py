"""KIP-345 rules of the coordinator: replacement, fencing of the stale member id, leave by instance id."""

from __future__ import annotations

from nereus.kafka.server.groups.members import FENCED_INSTANCE_ID, NONE, PREPARING, STABLE, GroupError

from .test_coordinator import _coordinator, done, engine  # noqa: F401  (fixture)


def _join(group, instance: str, member_id: str = "", metadata: bytes = b"m"):
    return group.join(member_id, "client", "host", 100.0, 5.0, "consumer", [("range", metadata)], instance)


async def _two_static_members(coord):
    group = await coord.group("g")
    first = await done(_join(group, "a"))
    second = _join(group, "b")
    a, b = await done(_join(group, "a", member_id=first.member_id)), await done(second)
    leader = a if a.member_id == group.leader else b
    assignments = {a.member_id: b"A", b.member_id: b"B"}
    syncs = [group.sync(m.member_id, m.generation, assignments if m is leader else {}) for m in (a, b)]
    assert [await done(s) for s in syncs] == [(NONE, b"A"), (NONE, b"B")]
    return group, a.member_id, b.member_id


async def test_restarted_static_member_takes_the_old_place_and_the_old_id_is_fenced(engine):  # noqa: F811
    coord = _coordinator(engine.client())
    group, a, b = await _two_static_members(coord)
    generation = group.generation
    rejoined = await done(_join(group, "b"))
    assert rejoined.error == NONE and rejoined.member_id != b
    assert group.state == STABLE and group.generation == generation  # no rebalance
    assert await done(group.sync(rejoined.member_id, generation, {}, "b")) == (NONE, b"B")
    for call in (lambda: group.heartbeat(b, generation, "b"), lambda: group.sync(b, generation, {}, "b"),
                 lambda: _join(group, "b", member_id=b)):
        try:
            call()
            raise AssertionError("the replaced member id was not fenced")
        except GroupError as exc:
            assert exc.code == FENCED_INSTANCE_ID
    assert group.check_commit(b, generation, "b") == FENCED_INSTANCE_ID
    assert group.heartbeat(a, generation, "a") == NONE
    await coord.stop()


async def test_changed_protocols_of_a_restarted_static_member_rebalance(engine):  # noqa: F811
    coord = _coordinator(engine.client())
    group, a, b = await _two_static_members(coord)
    pending = _join(group, "b", metadata=b"other")
    assert group.state == PREPARING  # the protocol metadata changed: the leader must assign again
    assert group.heartbeat(a, group.generation, "a") == 27
    pending.cancel()
    await coord.stop()


async def test_leave_by_instance_id(engine):  # noqa: F811
    coord = _coordinator(engine.client())
    group, a, b = await _two_static_members(coord)
    assert group.leave("", "nobody") == 25
    assert group.leave("stale-id", "b") == FENCED_INSTANCE_ID
    assert group.leave("", "b") == NONE
    assert set(group.members) == {a} and group.state == PREPARING
    await coord.stop()
