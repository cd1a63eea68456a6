"""The ``simple`` share group assignor: balanced, every partition served, sticky across changes."""

from __future__ import annotations

import random
from collections import Counter

from nereus.kafka.server.share.assignor import assign


def _members_per_partition(assignment) -> Counter:
    return Counter((t, p) for parts in assignment.values() for t, ps in parts.items() for p in ps)


def _sizes(assignment) -> list[int]:
    return sorted(sum(len(ps) for ps in parts.values()) for parts in assignment.values())


def test_fewer_members_than_partitions_each_partition_has_one_member_and_counts_differ_by_one():
    for members in range(1, 9):
        for partitions in range(members, 20):
            subs = {f"m{i}": frozenset({"t"}) for i in range(members)}
            out = assign(subs, {"t": partitions})
            shared = _members_per_partition(out)
            assert set(shared) == {("t", p) for p in range(partitions)} and set(shared.values()) == {1}
            sizes = _sizes(out)
            assert sizes[-1] - sizes[0] <= 1


def test_more_members_than_partitions_each_member_has_one_partition_shared_evenly():
    for partitions in range(1, 6):
        for members in range(partitions + 1, 20):
            out = assign({f"m{i}": frozenset({"t"}) for i in range(members)}, {"t": partitions})
            assert _sizes(out) == [1] * members
            shared = _members_per_partition(out)
            assert len(shared) == partitions and max(shared.values()) - min(shared.values()) <= 1


def test_a_homogeneous_subscription_balances_over_all_its_topics():
    out = assign({"a": frozenset({"t", "u"}), "b": frozenset({"t", "u"})}, {"t": 3, "u": 3})
    assert _sizes(out) == [3, 3]


def test_topics_subscribed_by_some_members_go_to_those_members_only():
    out = assign({"a": frozenset({"t", "u"}), "b": frozenset({"t"}), "c": frozenset({"x"})}, {"t": 4, "u": 2})
    assert set(out["b"]) == {"t"} and out["c"] == {}
    assert _members_per_partition(out) == Counter({("t", p): 1 for p in range(4)} | {("u", p): 1 for p in range(2)})


def test_a_join_or_a_leave_moves_few_partitions():
    rng = random.Random(7)
    subs = {f"m{i}": frozenset({"t"}) for i in range(4)}
    current = assign(subs, {"t": 12})
    for step in range(40):
        if len(subs) > 1 and rng.random() < 0.5:
            subs.pop(rng.choice(sorted(subs)))
        else:
            subs[f"n{step}"] = frozenset({"t"})
        before = {(m, p) for m, parts in current.items() if m in subs for p in parts.get("t", ())}
        current = assign(subs, {"t": 12}, current)
        after = {(m, p) for m, parts in current.items() for p in parts.get("t", ())}
        kept = len(before & after)
        # balance forces at most ceil(12 / members) + 1 moves per change; the rest stays put
        assert len(before) - kept <= 12 // len(subs) + 2
        sizes = _sizes(current)
        assert sizes[-1] - sizes[0] <= 1 and len(_members_per_partition(current)) == 12
