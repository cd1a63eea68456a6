"""The checker itself, on histories whose verdict is known."""

from __future__ import annotations

from tests.oxia.linearizability import CAS, INF, READ, WRITE, Op, check


def test_sequential_histories():
    assert check([Op(0, 1, WRITE, "a"), Op(2, 3, READ, result="a")])
    assert not check([Op(0, 1, WRITE, "a"), Op(2, 3, READ, result=None)])  # stale read
    assert not check([Op(0, 1, READ, result="ghost")])  # never written
    assert check([Op(0, 1, READ, result=None)])


def test_overlapping_ops_may_go_either_way():
    assert check([Op(0, 5, WRITE, "a"), Op(1, 2, READ, result=None), Op(3, 4, READ, result="a")])
    # ... but once a read saw the new value, a later read cannot see the old one.
    assert not check([Op(0, 10, WRITE, "a"), Op(1, 2, READ, result="a"), Op(3, 4, READ, result=None)])


def test_write_order_respected():
    h = [Op(0, 1, WRITE, "a"), Op(2, 3, WRITE, "b"), Op(4, 5, READ, result="a")]
    assert not check(h)
    h = [Op(0, 3, WRITE, "a"), Op(1, 4, WRITE, "b"), Op(5, 6, READ, result="a")]
    assert check(h)  # concurrent writes: "b" then "a" is a valid order
    h += [Op(7, 8, READ, result="b")]
    assert not check(h)


def test_cas():
    base = [Op(0, 1, WRITE, "a")]
    assert check(base + [Op(2, 3, CAS, ("a", "b"), True), Op(4, 5, READ, result="b")])
    # Two CAS from the same expected value cannot both succeed.
    assert not check(base + [Op(2, 5, CAS, ("a", "b"), True), Op(3, 6, CAS, ("a", "c"), True)])
    assert check(base + [Op(2, 5, CAS, ("a", "b"), True), Op(3, 6, CAS, ("a", "c"), False)])
    # A failed CAS whose expectation held the whole time is wrong.
    assert not check(base + [Op(2, 3, CAS, ("a", "b"), False)])
    assert check([Op(0, 1, CAS, (None, "x"), True), Op(2, 3, READ, result="x")])


def test_unknown_outcomes():
    # An unacknowledged write may take effect late, or never.
    assert check([Op(0, INF, WRITE, "a"), Op(5, 6, READ, result=None), Op(7, 8, READ, result="a")])
    assert check([Op(0, INF, WRITE, "a"), Op(5, 6, READ, result=None)])
    # But not before it was called.
    assert not check([Op(0, 1, READ, result="a"), Op(2, INF, WRITE, "a")])
    # Nor undone once seen.
    assert not check([Op(0, INF, WRITE, "a"), Op(1, 2, READ, result="a"), Op(3, 4, READ, result=None)])
    assert check([Op(0, 1, WRITE, "a"), Op(2, INF, CAS, ("a", "b")), Op(9, 10, READ, result="b")])
    assert not check([Op(0, 1, WRITE, "z"), Op(2, INF, CAS, ("a", "b")), Op(9, 10, READ, result="b")])


def test_larger_history_is_fast():
    h, t = [], 0.0
    for i in range(400):  # three clients in lock step, each write then read
        for c in range(3):
            h.append(Op(t, t + 2.5, WRITE, f"{c}-{i}"))
            t += 1
        h.append(Op(t, t + 0.5, READ, result=f"2-{i}"))
        t += 3
    assert check(h)
