"""The KIP-848 state machine: epochs, revocation before assignment, fencing, static members."""

from __future__ import annotations

from nereus.kafka.server.groups.consumer_group import FENCED_MEMBER_EPOCH, ConsumerGroupState


def _beat(state, member, epoch, owned=None, topics=("t",), instance=None):
    return state.heartbeat(member_id=member, epoch=epoch, instance_id=instance, rack_id=None, client_id="c",
                           client_host="h", rebalance_timeout=30.0, topics=list(topics) if topics else None,
                           assignor=None, owned=owned, partitions={"t": 4}, now=0.0)


def test_a_partition_moves_only_after_its_owner_released_it():
    state = ConsumerGroupState()
    a = _beat(state, "a", 0)
    assert a.assignment == {"t": frozenset({0, 1, 2, 3})}
    b = _beat(state, "b", 0)
    assert b.assignment == {} and b.epoch == state.epoch  # everything is still held by a
    a2 = _beat(state, "a", a.epoch, owned=a.assignment, topics=None)
    assert a2.epoch == a.epoch and a2.assignment == {"t": frozenset({0, 1})}  # revoke first, same epoch
    b2 = _beat(state, "b", b.epoch, owned={}, topics=None)
    assert b2.assignment == {}  # 2 and 3 not yet confirmed released
    a3 = _beat(state, "a", a2.epoch, owned=a2.assignment, topics=None)
    assert a3.epoch == state.epoch and a3.assignment == {"t": frozenset({0, 1})}
    b3 = _beat(state, "b", b2.epoch, owned={}, topics=None)
    assert b3.assignment == {"t": frozenset({2, 3})}
    assert state.state == "Stable"


def test_stale_epoch_is_fenced_and_leaving_frees_the_partitions():
    state = ConsumerGroupState()
    a = _beat(state, "a", 0)
    assert _beat(state, "a", a.epoch + 5).error == FENCED_MEMBER_EPOCH
    assert _beat(state, "nobody", 3).error == 25
    b = _beat(state, "b", 0)
    _beat(state, "a", -1)
    assert _beat(state, "b", b.epoch, owned={}, topics=None).assignment == {"t": frozenset({0, 1, 2, 3})}


def test_static_member_restarting_takes_its_old_target_without_a_new_group_epoch():
    state = ConsumerGroupState()
    a = _beat(state, "a", 0, instance="i-a")
    b = _beat(state, "b", 0, instance="i-b")
    a = _beat(state, "a", a.epoch, owned=a.assignment, topics=None)
    _beat(state, "a", a.epoch, owned=a.assignment, topics=None)
    b = _beat(state, "b", b.epoch, owned={}, topics=None)
    epoch, before = state.epoch, b.assignment
    assert _beat(state, "b", b.epoch, topics=None, instance="i-b").error == 0
    _beat(state, "b", -2, instance="i-b")
    again = _beat(state, "b2", 0, instance="i-b")
    assert again.member_id == "b2" and "b" not in state.members and state.epoch == epoch
    assert again.assignment == before == {"t": frozenset({2, 3})}
    _beat(state, "b2", -1)
    assert state.epoch > epoch and list(state.members) == ["a"]


def test_a_heartbeat_at_the_previous_epoch_after_a_lost_answer_is_accepted():
    state = ConsumerGroupState()
    a = _beat(state, "a", 0)
    _beat(state, "b", 0)
    a = _beat(state, "a", a.epoch, owned=a.assignment, topics=None)  # revoke 2, 3; same epoch
    old_epoch, kept = a.epoch, a.assignment
    moved = _beat(state, "a", old_epoch, owned=kept, topics=None)
    assert moved.epoch > old_epoch
    # that answer was lost: the member still says the old epoch, owning a subset of its assignment
    again = _beat(state, "a", old_epoch, owned=kept, topics=None)
    assert again.error == 0 and again.epoch == moved.epoch and again.assignment == kept
    assert _beat(state, "a", old_epoch, owned={"t": frozenset({0, 1, 2})}, topics=None).error == FENCED_MEMBER_EPOCH
    assert _beat(state, "a", old_epoch, owned=None, topics=None).error == FENCED_MEMBER_EPOCH
    assert _beat(state, "a", old_epoch - 1, owned=kept, topics=None).error == FENCED_MEMBER_EPOCH
    assert _beat(state, "a", moved.epoch, owned=kept, topics=None).error == 0


def test_the_previous_epoch_survives_a_reload():
    state = ConsumerGroupState()
    a = _beat(state, "a", 0)
    _beat(state, "b", 0)
    a = _beat(state, "a", a.epoch, owned=a.assignment, topics=None)
    moved = _beat(state, "a", a.epoch, owned=a.assignment, topics=None)
    reloaded = ConsumerGroupState.from_json(state.to_json())
    assert _beat(reloaded, "a", a.epoch, owned=a.assignment, topics=None).epoch == moved.epoch
