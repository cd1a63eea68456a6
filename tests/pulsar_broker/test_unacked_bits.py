"""The ack set of a partly acknowledged batch, against a record-by-record model."""

from hypothesis import given
from hypothesis import strategies as st

from nereus.ledger.ackset import AckSet
from nereus.pulsar.server.dispatcher import _unacked_bits
from nereus.pulsar.server.pending_acks import PendingAcks

ranges = st.lists(st.tuples(st.integers(0, 200), st.integers(1, 30)), max_size=12)


@given(ranges, ranges, st.integers(0, 120), st.integers(1, 150))
def test_unacked_bits_agree_with_each_records_state(acked, held_ranges, base, count):
    acks = AckSet()
    for start, n in acked:
        acks.ack(start, start + n)
    held = PendingAcks()
    for start, n in held_ranges:
        held.add(7, [[-1, n, start, start + n]])
    bits = _unacked_bits(base, count, acks.acked_ranges_between(base, base + count), held)
    want = [0] * ((count + 63) // 64)
    for i in range(count):
        if not acks.is_acked(base + i) and not held.is_held(base + i):
            want[i // 64] |= 1 << (i % 64)
    assert bits == [w - (1 << 64) if w >= 1 << 63 else w for w in want]
