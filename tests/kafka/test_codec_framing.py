"""The sans-io request framer: frames out of any split of the byte stream, views not copies."""

from __future__ import annotations

import struct

import pytest

from nereus.codec.kafka.framing import MIN_REQUEST_SIZE, FrameSizeError, RequestFramer


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


BODIES = [b"\x00\x12\x00\x03\x00\x00\x00\x01", bytes(range(256)) * 3, b"\x00\x00\x00\x07abcd" + b"z" * 40]
STREAM = b"".join(framed(b) for b in BODIES)


def drain(framer: RequestFramer, **kw) -> list[bytes]:
    out = []
    while (frame := framer.next_request(**kw)) is not None:
        assert isinstance(frame, memoryview)
        out.append(bytes(frame))
    return out


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_a_stream_split_at_any_byte_gives_the_same_frames(cut):
    framer = RequestFramer(1 << 20)
    framer.receive_data(STREAM[:cut])
    got = drain(framer)
    framer.receive_data(STREAM[cut:])
    got += drain(framer)
    assert got == BODIES
    assert framer.buffered == 0


def test_a_stream_fed_byte_by_byte_reports_a_partial_frame_until_it_is_whole():
    framer = RequestFramer(1 << 20)
    got = []
    one = framed(BODIES[1])
    for i in range(len(one)):
        framer.receive_data(one[i:i + 1])
        got += drain(framer)
        assert framer.buffered == (0 if i == len(one) - 1 else i + 1)
    assert got == [BODIES[1]]


def test_several_frames_in_one_read_are_views_of_that_read():
    framer = RequestFramer(1 << 20)
    framer.receive_data(STREAM)
    frames = list(framer)
    assert [bytes(f) for f in frames] == BODIES
    assert all(f.obj is STREAM for f in frames)  # no copy: slices of the received bytes


def test_a_frame_spanning_reads_is_joined_once_and_stays_valid():
    framer = RequestFramer(1 << 20)
    one = framed(BODIES[1])
    framer.receive_data(one[:100])
    framer.receive_data(bytearray(one[100:]))  # a mutable buffer is copied: its owner may reuse it
    (frame,) = list(framer)
    assert bytes(frame) == BODIES[1] and isinstance(frame.obj, bytes)


def test_empty_reads_change_nothing():
    framer = RequestFramer(1 << 20)
    framer.receive_data(b"")
    assert framer.next_request() is None and framer.buffered == 0
    framer.receive_data(STREAM[:3])
    framer.receive_data(b"")
    assert framer.next_request() is None and framer.buffered == 3


@pytest.mark.parametrize("size", [-1, 0, MIN_REQUEST_SIZE - 1, 1001, 0x7FFFFFFF])
def test_frames_below_a_header_or_above_the_limit_are_refused_for_good(size):
    framer = RequestFramer(1000)
    framer.receive_data(struct.pack(">i", size))
    with pytest.raises(FrameSizeError) as error:
        framer.next_request()
    assert error.value.size == size and "limit 1000" in str(error.value)
    framer.receive_data(b"x" * 16)
    with pytest.raises(FrameSizeError):
        framer.next_request()


def test_the_limit_is_checked_before_the_frame_arrives_and_the_largest_allowed_passes():
    framer = RequestFramer(1000)
    framer.receive_data(framed(b"y" * 1000)[:10])
    assert framer.next_request() is None
    framer.receive_data(b"y" * 994)
    assert framer.next_request() == b"y" * 1000
    framer.max_size = 500
    framer.receive_data(struct.pack(">i", 501))
    with pytest.raises(FrameSizeError):
        framer.next_request()


def test_short_frames_pass_when_allowed_as_sasl_tokens_do():
    framer = RequestFramer(1000)
    framer.receive_data(framed(b"tok") + framed(b""))
    assert drain(framer, allow_short=True) == [b"tok", b""]
    framer.receive_data(framed(b"tok"))
    with pytest.raises(FrameSizeError):
        framer.next_request()
