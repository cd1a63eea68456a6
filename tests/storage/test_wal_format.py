import pytest
from hypothesis import given
from hypothesis import strategies as st

from nereus.storage import CorruptObject
from nereus.storage.wal_format import decode_directory, decode_slice, encode_object

entries = st.lists(st.tuples(st.integers(1, 1000), st.binary(min_size=1, max_size=300)), min_size=1, max_size=8)
slices = st.lists(st.tuples(st.integers(0, 2**63 - 1), entries), min_size=1, max_size=6,
                  unique_by=lambda s: s[0])


@given(slices)
def test_slices_round_trip(layout):
    encoded = encode_object(layout)
    blob = b"".join(encoded.chunks)
    assert len(blob) == encoded.size
    directory = decode_directory(blob)
    assert [(d.stream_id, d.position, d.length) for d in directory] == \
        [(s.stream_id, s.position, s.length) for s in encoded.slices]
    for (stream_id, written), where in zip(layout, encoded.slices):
        got = decode_slice(blob[where.position:where.position + where.length], stream_id)
        assert [(c, bytes(d)) for c, d in got] == written
        assert where.record_count == sum(c for c, _ in written)


@given(slices, st.data())
def test_any_flipped_byte_in_a_slice_is_detected(layout, data):
    encoded = encode_object(layout)
    blob = bytearray(b"".join(encoded.chunks))
    where = data.draw(st.sampled_from(encoded.slices))
    pos = data.draw(st.integers(where.position, where.position + where.length - 1))
    blob[pos] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptObject):
        decode_slice(bytes(blob[where.position:where.position + where.length]), where.stream_id)


def test_slice_of_another_stream_or_truncated_is_rejected():
    encoded = encode_object([(7, [(1, b"abc")])])
    blob = b"".join(encoded.chunks)
    s = encoded.slices[0]
    with pytest.raises(CorruptObject, match="stream 7"):
        decode_slice(blob[s.position:s.position + s.length], 8)
    with pytest.raises(CorruptObject):
        decode_slice(blob[s.position:s.position + s.length - 1], 7)
    with pytest.raises(CorruptObject):
        decode_directory(b"garbage" * 10)
