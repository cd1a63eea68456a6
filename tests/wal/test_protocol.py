"""The replica protocol codec: round trips, any chunking, and bad input refused clearly."""

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nereus.wal import BlockFenced, EntryNotFound, ProtocolError, WalCorrupt, WalError, WalFull
from nereus.wal.protocol import (
    MAX_FRAME_BYTES,
    Append,
    Blocks,
    Drop,
    Fence,
    FrameDecoder,
    Ping,
    Read,
    Response,
    Status,
    encode,
    failure,
    raise_for,
)

MESSAGES = [
    Append(1, "block-1", "wal/0001732800000-node1-0000000042", b"\x00\x01data"),
    Append(2, "b", "k", b""),
    Read(3, "wal/x"),
    Read(4, "wal/x", 10, 20),
    Fence(5, "block-1"),
    Drop(6, "block-\u00e9"),
    Blocks(7),
    Ping(2**64 - 1),
    Response(1),
    Response(5, names=("wal/a", "wal/b")),
    Response(3, data=b"entry bytes"),
    Response(9, Status.FENCED, "block 'b' is fenced"),
]


def frames(*messages) -> bytes:
    return b"".join(bytes(chunk) for message in messages for chunk in encode(message))


def normalised(message):
    """``message`` with its data as bytes, the way the tests compare them."""
    if isinstance(message, (Append, Response)):
        data = message.data
        data = b"".join(bytes(c) for c in data) if isinstance(data, list) else bytes(data)
        return type(message)(**{**{f: getattr(message, f) for f in message.__slots__}, "data": data})
    return message


def decode_all(data: bytes, chunk: int | None = None) -> list:
    decoder = FrameDecoder()
    out = []
    for start in range(0, len(data), chunk or max(len(data), 1)):
        decoder.receive_data(data[start:start + (chunk or len(data))])
        out.extend(normalised(message) for message in decoder)
    assert decoder.buffered == 0
    return out


def test_every_message_round_trips():
    for message in MESSAGES:
        assert decode_all(frames(message)) == [normalised(message)]


def test_appended_chunks_travel_as_one_entry():
    message = Append(1, "b", "k", [b"head", memoryview(b"-and-"), b"tail"])
    assert decode_all(frames(message)) == [Append(1, "b", "k", b"head-and-tail")]


def test_frames_fed_byte_by_byte_or_all_at_once():
    data = frames(*MESSAGES)
    expected = [normalised(message) for message in MESSAGES]
    assert decode_all(data) == expected
    assert decode_all(data, chunk=1) == expected
    assert decode_all(data, chunk=7) == expected


def test_a_frame_within_one_chunk_is_not_copied():
    data = frames(Append(1, "b", "k", b"x" * 1000))
    decoder = FrameDecoder()
    decoder.receive_data(data)
    message = decoder.next_message()
    assert isinstance(message.data, memoryview) and message.data.obj is data


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.text(max_size=40), st.text(max_size=40),
                          st.binary(max_size=300)), max_size=8),
       st.integers(1, 64))
def test_appends_round_trip_in_any_chunks(appends, chunk):
    messages = [Append(*fields) for fields in appends]
    assert decode_all(frames(*messages), chunk) == messages


def refused(data: bytes, match: str) -> None:
    decoder = FrameDecoder()
    decoder.receive_data(data)
    with pytest.raises(ProtocolError, match=match):
        decoder.next_message()
    with pytest.raises(ProtocolError, match=match):  # for good: the stream cannot be resynchronised
        decoder.next_message()


def body(*parts: bytes) -> bytes:
    payload = b"".join(parts)
    return struct.pack(">I", len(payload)) + payload


def test_bad_input_is_refused_clearly():
    request_id = struct.pack(">Q", 1)
    refused(body(b"\x63", request_id), "unknown op 99")
    refused(struct.pack(">I", MAX_FRAME_BYTES) + b"\x01", "exceeds the limit")
    refused(body(b"\x01"), "shorter than any message")
    refused(body(b"\x03", request_id, b"\x00\x10abc"), "truncated")
    refused(body(b"\x03", request_id, b"\x00\x02\xff\xfe"), "UTF-8")
    refused(body(b"\x06", request_id, b"extra"), "left over")
    refused(body(b"\x80", request_id, b"\x09\x00\x00\x00\x00\x00\x00"), "unknown status")
    refused(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "exceeds the limit")


def test_a_partial_frame_waits_for_the_rest():
    data = frames(Fence(1, "block"))
    decoder = FrameDecoder()
    decoder.receive_data(data[:-1])
    assert decoder.next_message() is None
    decoder.receive_data(data[-1:])
    assert decoder.next_message() == Fence(1, "block")


def test_errors_and_statuses_translate_both_ways():
    for error in (BlockFenced, EntryNotFound, WalFull, WalCorrupt, WalError):
        response = failure(7, error("what happened"))
        with pytest.raises(error, match="what happened") as raised:
            raise_for(decode_all(frames(response))[0])
        assert type(raised.value) is error
    assert failure(7, RuntimeError("boom")).status == Status.ERROR
    assert raise_for(Response(7)) == Response(7)


def test_names_too_long_are_refused_before_sending():
    with pytest.raises(ValueError, match="65535"):
        encode(Fence(1, "x" * 70_000))
