from hypothesis import given
from hypothesis import strategies as st

from nereus.ledger.ackset import AckSet

ops = st.lists(st.one_of(
    st.tuples(st.just("ack"), st.integers(0, 60), st.integers(1, 6)),
    st.tuples(st.just("cum"), st.integers(-1, 60), st.just(0)),
), max_size=40)


@given(ops)
def test_ackset_agrees_with_a_plain_set(operations):
    acks = AckSet()
    model: set[int] = set()
    for kind, a, n in operations:
        if kind == "ack":
            acks.ack(a, a + n)
            model.update(range(a, a + n))
        else:
            acks.ack_cumulative(a)
            model.update(range(0, a + 1))
        for o in range(0, 70):
            assert acks.is_acked(o) == (o in model)
        # canonical form: ranges sorted, disjoint, non-adjacent, all above acked_below
        prev_end = acks.acked_below
        for s, e in acks.ranges:
            assert prev_end < s < e
            prev_end = e
        assert acks.acked_below == next(o for o in range(0, 80) if o not in model)
        assert AckSet.from_json(acks.to_json()) == acks
        start = 7
        expect_next = next(o for o in range(start, 200) if o not in model)
        assert acks.next_unacked(start) == expect_next
        for lo, hi in ((5, 50), (0, 3), (12, 13), (20, 41), (33, 90), (60, 61)):
            assert acks.acked_count_between(lo, hi) == len([o for o in model if lo <= o < hi])
            listed = [o for s, e in acks.acked_ranges_between(lo, hi) for o in range(s, e)]
            assert listed == sorted(o for o in model if lo <= o < hi)


def _canonical(acks: AckSet) -> None:
    prev_end = acks.acked_below
    for s, e in acks.ranges:
        assert prev_end < s < e
        prev_end = e


@given(ops, st.lists(st.tuples(st.integers(0, 4), st.integers(0, 5)), max_size=12))
def test_ack_ranges_equals_acking_each_range(operations, steps):
    """Bulk acks (gaps and lengths, touching runs allowed) leave the same set as one ack per range."""
    one_by_one, bulk = AckSet(), AckSet()
    for kind, a, n in operations:
        for acks in (one_by_one, bulk):
            acks.ack(a, a + n) if kind == "ack" else acks.ack_cumulative(a)
    ranges, at = [], 40
    for gap, length in steps:
        at += gap
        ranges.append((at, at + length))
        at += length
    for start, end in ranges:
        one_by_one.ack(start, end)
    bulk.ack_ranges(ranges)
    assert bulk == one_by_one
    _canonical(bulk)
