"""Batched payloads: build/parse round trips and malformed batches."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nereus.codec.pulsar import (
    BatchBuilder,
    FrameDecoder,
    MalformedBatch,
    build_batch,
    encode_payload_command,
    iter_batch,
    parse_batch,
    pb,
    wrap,
)

single_meta = st.builds(
    lambda key, props, seq, null: pb.SingleMessageMetadata(
        partition_key=key,
        properties=[pb.KeyValue(key=k, value=v) for k, v in props],
        sequence_id=seq,
        null_value=null,
    ),
    st.text(max_size=10),
    st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=3),
    st.integers(0, 2**64 - 1),
    st.booleans(),
)
messages = st.lists(st.tuples(st.binary(max_size=200), st.one_of(st.none(), single_meta)), max_size=20)


def _copy(meta):
    return pb.SingleMessageMetadata.FromString(meta.SerializePartialToString())


def _expected(pairs):
    return [(payload, meta or pb.SingleMessageMetadata()) for payload, meta in pairs]


@settings(max_examples=100, deadline=None)
@given(messages)
def test_round_trip(pairs):
    # Copies: BatchBuilder.add sets payload_size on the messages it is given.
    expected = _expected([(p, None if m is None else _copy(m)) for p, m in pairs])
    buffers, count = build_batch(pairs)
    raw = b"".join(bytes(b) for b in buffers)
    parsed = parse_batch(raw, count)
    assert count == len(pairs) == len(parsed)
    for message, (payload, meta) in zip(parsed, expected):
        assert bytes(message.payload) == payload
        meta.payload_size = len(payload)
        assert message.metadata == meta
        assert message.payload.obj is raw  # a view, not a copy


@settings(max_examples=50, deadline=None)
@given(messages.filter(bool))
def test_batch_inside_a_frame(pairs):
    builder = BatchBuilder()
    for payload, meta in pairs:
        builder.add(payload, meta)
    assert builder.size == len(builder.to_bytes())
    count = builder.num_messages
    meta = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0, num_messages_in_batch=count)
    cmd = wrap(pb.CommandSend(producer_id=1, sequence_id=0, num_messages=builder.num_messages))
    decoder = FrameDecoder()
    decoder.receive_data(b"".join(bytes(b) for b in encode_payload_command(cmd, meta, builder.buffers())))
    frame = decoder.next_frame()
    assert frame.checksum_ok
    got = [bytes(m.payload) for m in iter_batch(frame.payload, frame.metadata.num_messages_in_batch)]
    assert got == [p for p, _ in pairs]


def test_iteration_is_lazy():
    builder = BatchBuilder()
    builder.add(b"first")
    builder.add(b"second")
    raw = builder.to_bytes()[:-3]  # the second message is cut short
    it = iter_batch(raw, 2)
    assert bytes(next(it).payload) == b"first"
    with pytest.raises(MalformedBatch):
        next(it)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(min_size=1, max_size=50), min_size=1, max_size=5), st.data())
def test_truncated_batch(payloads, data):
    raw, count = build_batch((p, None) for p in payloads)
    raw = b"".join(raw)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(MalformedBatch):
        parse_batch(raw[:cut], count)


def test_more_messages_announced_than_present():
    raw, _ = build_batch([(b"a", None)])
    with pytest.raises(MalformedBatch):
        parse_batch(b"".join(raw), 2)


def test_negative_count():
    with pytest.raises(MalformedBatch):
        parse_batch(b"", -1)


def test_negative_payload_size():
    header = pb.SingleMessageMetadata(payload_size=-5).SerializeToString()
    with pytest.raises(MalformedBatch):
        parse_batch(struct.pack(">I", len(header)) + header + b"xxxxx", 1)


def test_missing_payload_size():
    header = pb.SingleMessageMetadata(partition_key="k").SerializePartialToString()
    with pytest.raises(MalformedBatch):
        parse_batch(struct.pack(">I", len(header)) + header, 1)


def test_garbage_metadata():
    with pytest.raises(MalformedBatch):
        parse_batch(struct.pack(">I", 3) + b"\xff\xff\xff", 1)


def test_metadata_size_overrun():
    with pytest.raises(MalformedBatch):
        parse_batch(struct.pack(">I", 100) + b"abc", 1)


def test_trailing_bytes_are_ignored():
    raw, count = build_batch([(b"a", None)])
    assert [bytes(m.payload) for m in parse_batch(b"".join(raw) + b"junk", count)] == [b"a"]


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=100), st.integers(0, 5))
def test_garbage_raises_only_malformed_batch(garbage, count):
    try:
        parse_batch(garbage, count)
    except MalformedBatch:
        pass
