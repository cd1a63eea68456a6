"""Frame encoder/decoder: round trips over arbitrary stream splits, and bad input."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nereus.codec.pulsar import (
    ChecksumMismatch,
    CorruptStream,
    FrameDecoder,
    FrameTooLarge,
    MalformedFrame,
    PulsarCodecError,
    TruncatedFrame,
    UnknownCommand,
    encode_command,
    encode_entry_command,
    encode_payload_command,
    pb,
    wrap,
)

U64 = st.integers(0, 2**64 - 1)
TEXT = st.text(max_size=20)
KVS = st.lists(st.tuples(TEXT, TEXT), max_size=3)


def _kv(pairs):
    return [pb.KeyValue(key=k, value=v) for k, v in pairs]


simple_commands = st.one_of(
    st.builds(lambda v, p: wrap(pb.CommandConnect(client_version=v, protocol_version=p)), TEXT, st.integers(0, 21)),
    st.builds(lambda r, n: wrap(pb.CommandFlow(consumer_id=r, messagePermits=n)), U64, st.integers(0, 2**32 - 1)),
    st.builds(lambda r, t: wrap(pb.CommandLookupTopic(request_id=r, topic=t)), U64, TEXT),
    st.builds(
        lambda t, r, kv: wrap(pb.CommandProducer(topic=t, producer_id=1, request_id=r, metadata=_kv(kv))),
        TEXT,
        U64,
        KVS,
    ),
    st.builds(
        lambda c, ids: wrap(
            pb.CommandAck(
                consumer_id=c,
                ack_type=pb.CommandAck.Individual,
                message_id=[pb.MessageIdData(ledgerId=a, entryId=b) for a, b in ids],
            )
        ),
        U64,
        st.lists(st.tuples(U64, U64), max_size=4),
    ),
    st.builds(lambda r, e, m: wrap(pb.CommandError(request_id=r, error=e, message=m)), U64, st.integers(0, 25), TEXT),
    st.just(wrap(pb.CommandPing())),
    st.just(wrap(pb.CommandPong())),
)


@st.composite
def payload_frames(draw):
    """(command, metadata, payload parts, broker entry metadata or None)."""
    seq = draw(U64)
    if draw(st.booleans()):
        command = wrap(pb.CommandSend(producer_id=draw(U64), sequence_id=seq, num_messages=draw(st.integers(1, 100))))
    else:
        mid = pb.MessageIdData(ledgerId=draw(U64), entryId=draw(U64))
        command = wrap(pb.CommandMessage(consumer_id=draw(U64), message_id=mid))
    metadata = pb.MessageMetadata(
        producer_name=draw(TEXT), sequence_id=seq, publish_time=draw(U64), properties=_kv(draw(KVS))
    )
    if draw(st.booleans()):
        metadata.partition_key = draw(TEXT)
    parts = draw(st.lists(st.binary(max_size=300), max_size=4))
    bem = None
    if draw(st.booleans()):
        bem = pb.BrokerEntryMetadata(broker_timestamp=draw(U64), index=draw(U64))
    return command, metadata, parts, bem


def _encode(item) -> bytes:
    if isinstance(item, pb.BaseCommand):
        return encode_command(item)
    command, metadata, parts, bem = item
    return b"".join(bytes(b) for b in encode_payload_command(command, metadata, parts, broker_entry_metadata=bem))


def _feed(data: bytes, cuts: list[int], decoder: FrameDecoder | None = None) -> list:
    decoder = decoder or FrameDecoder()
    frames = []
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for a, b in zip(points, points[1:]):
        decoder.receive_data(data[a:b])
        frames.extend(decoder)
    decoder.receive_eof()
    assert decoder.next_frame() is None and decoder.buffered == 0
    return frames


def _check(frame, item) -> None:
    if isinstance(item, pb.BaseCommand):
        assert frame.command == item
        assert frame.payload is None and frame.metadata is None and frame.entry is None
        return
    command, metadata, parts, bem = item
    assert frame.command == command
    assert frame.metadata == metadata
    assert bytes(frame.payload) == b"".join(parts)
    assert frame.checksum_ok and frame.checksum is not None
    frame.verify()
    assert frame.broker_entry_metadata == bem


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(simple_commands, payload_frames()), min_size=1, max_size=6), st.lists(st.integers(0, 10**6)))
def test_stream_round_trip_any_split(items, cuts):
    data = b"".join(_encode(item) for item in items)
    frames = _feed(data, cuts)
    assert len(frames) == len(items)
    for frame, item in zip(frames, items):
        _check(frame, item)


@settings(max_examples=30, deadline=None)
@given(payload_frames())
def test_byte_at_a_time(item):
    data = _encode(item)
    decoder = FrameDecoder()
    for i in range(len(data) - 1):
        decoder.receive_data(data[i : i + 1])
        assert decoder.next_frame() is None
    decoder.receive_data(data[-1:])
    _check(decoder.next_frame(), item)


@settings(max_examples=50, deadline=None)
@given(payload_frames())
def test_entry_is_forwarded_verbatim(item):
    """Broker path: the received entry goes out behind a new command unchanged."""
    (frame,) = _feed(_encode(item), [])
    out = wrap(pb.CommandMessage(consumer_id=5, message_id=pb.MessageIdData(ledgerId=1, entryId=2)))
    bem = pb.BrokerEntryMetadata(index=9)
    buffers = encode_entry_command(out, frame.entry, broker_entry_metadata=bem)
    (again,) = _feed(b"".join(bytes(b) for b in buffers), [])
    assert again.command == out and again.broker_entry_metadata == bem
    assert bytes(again.entry) == bytes(frame.entry)
    assert again.checksum_ok and again.metadata == item[1]


def test_payload_is_a_view_of_the_received_chunk():
    meta = pb.MessageMetadata(producer_name="p", sequence_id=2, publish_time=3)
    item = (wrap(pb.CommandSend(producer_id=1, sequence_id=2)), meta, [b"x" * 1000], None)
    chunk = _encode(item)
    decoder = FrameDecoder()
    decoder.receive_data(chunk)
    frame = decoder.next_frame()
    assert frame.payload.obj is chunk  # zero copy: a slice of what the transport gave


def test_mutable_input_is_copied():
    data = bytearray(encode_command(wrap(pb.CommandPing())))
    decoder = FrameDecoder()
    decoder.receive_data(data)
    data[:] = b"\xff" * len(data)
    assert decoder.next_frame().command.type == pb.BaseCommand.PING


def test_wire_layout_is_exact():
    body = wrap(pb.CommandPing()).SerializeToString()
    assert encode_command(wrap(pb.CommandPing())) == struct.pack(">II", len(body) + 4, len(body)) + body
    meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2).SerializeToString()
    cmd = wrap(pb.CommandSend(producer_id=1, sequence_id=1))
    data = b"".join(encode_payload_command(cmd, meta, [b"ab", b"cd"]))
    cmd_bytes = cmd.SerializeToString()
    signed = struct.pack(">I", len(meta)) + meta + b"abcd"
    expected = struct.pack(">HI", 0x0E01, crc32c.crc32c(signed)) + signed
    total = 4 + len(cmd_bytes) + len(expected)
    assert data == struct.pack(">II", total, len(cmd_bytes)) + cmd_bytes + expected


# ---------------------------------------------------------------- bad input


def _frame(command_bytes: bytes, rest: bytes = b"") -> bytes:
    return struct.pack(">II", 4 + len(command_bytes) + len(rest), len(command_bytes)) + command_bytes + rest


PING = _frame(wrap(pb.CommandPing()).SerializeToString())


def test_oversized_frame_is_rejected_from_its_header():
    decoder = FrameDecoder(max_frame_size=1024)
    decoder.receive_data(struct.pack(">I", 1021))  # 1025 bytes with the prefix
    with pytest.raises(FrameTooLarge) as info:
        decoder.next_frame()
    assert info.value.size == 1025 and info.value.limit == 1024 and info.value.fatal
    decoder.receive_data(PING)
    with pytest.raises(FrameTooLarge):  # the stream stays failed
        decoder.next_frame()


def test_default_limit_admits_a_full_size_message():
    big = b"\0" * (5 * 1024 * 1024)
    meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    item = (wrap(pb.CommandSend(producer_id=1, sequence_id=1)), meta, [big], None)
    (frame,) = _feed(_encode(item), [65536 * i for i in range(1, 100)])
    assert frame.payload.nbytes == len(big)
    decoder = FrameDecoder()
    decoder.receive_data(struct.pack(">I", 6 * 1024 * 1024))
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


@pytest.mark.parametrize("total", [0, 1, 5])
def test_impossible_length_is_a_corrupt_stream(total):
    decoder = FrameDecoder()
    decoder.receive_data(struct.pack(">I", total) + b"\0" * 8)
    with pytest.raises(CorruptStream):
        decoder.next_frame()
    with pytest.raises(CorruptStream):
        decoder.next_frame()


@settings(max_examples=100, deadline=None)
@given(payload_frames(), st.data())
def test_truncated_stream(item, data):
    encoded = _encode(item)
    cut = data.draw(st.integers(1, len(encoded) - 1))
    decoder = FrameDecoder()
    decoder.receive_data(encoded[:cut])
    assert decoder.next_frame() is None
    decoder.receive_eof()
    with pytest.raises(TruncatedFrame):
        decoder.next_frame()


def _assert_skipped(bad: bytes, error: type[PulsarCodecError]) -> None:
    """``bad`` raises ``error``, and the decoder then reads the next frame."""
    decoder = FrameDecoder()
    decoder.receive_data(bad + PING)
    with pytest.raises(error):
        decoder.next_frame()
    assert decoder.next_frame().command.type == pb.BaseCommand.PING


def test_command_size_overrun():
    _assert_skipped(struct.pack(">II", 8, 50) + b"\0" * 4, MalformedFrame)


def test_garbage_command_bytes():
    _assert_skipped(_frame(b"\xff\xff\xff\xff\xff\xff"), MalformedFrame)


def test_missing_sub_command():
    _assert_skipped(_frame(pb.BaseCommand(type=pb.BaseCommand.SEND).SerializeToString()), MalformedFrame)


def test_missing_required_field():
    cmd = pb.BaseCommand(type=pb.BaseCommand.FLOW)
    cmd.flow.consumer_id = 1  # messagePermits is required
    _assert_skipped(_frame(cmd.SerializePartialToString()), MalformedFrame)


def test_unknown_command_type():
    _assert_skipped(_frame(b"\x08\x63"), UnknownCommand)  # type = 99


def test_metadata_size_overrun():
    send = wrap(pb.CommandSend(producer_id=1, sequence_id=1)).SerializeToString()
    _assert_skipped(_frame(send, struct.pack(">HII", 0x0E01, 0, 1000) + b"meta"), MalformedFrame)


def test_stray_bytes_after_command():
    send = wrap(pb.CommandSend(producer_id=1, sequence_id=1)).SerializeToString()
    _assert_skipped(_frame(send, b"\x01\x02"), MalformedFrame)


def test_broker_entry_metadata_overrun():
    send = wrap(pb.CommandSend(producer_id=1, sequence_id=1)).SerializeToString()
    _assert_skipped(_frame(send, struct.pack(">HI", 0x0E02, 500)), MalformedFrame)


def test_garbage_metadata_is_reported_on_access():
    send = wrap(pb.CommandSend(producer_id=1, sequence_id=1)).SerializeToString()
    decoder = FrameDecoder()
    decoder.receive_data(_frame(send, struct.pack(">I", 3) + b"\xff\xff\xff" + b"payload"))
    frame = decoder.next_frame()  # legacy layout: no checksum magic
    assert frame.checksum is None and frame.checksum_ok and bytes(frame.payload) == b"payload"
    with pytest.raises(MalformedFrame):
        _ = frame.metadata


@settings(max_examples=100, deadline=None)
@given(payload_frames(), st.data())
def test_bad_checksum_is_reported(item, data):
    buffers = encode_payload_command(*item[:3], broker_entry_metadata=item[3])
    encoded = bytearray(b"".join(bytes(b) for b in buffers))
    signed_from = len(encoded) - len(b"".join(item[2])) - len(item[1].SerializeToString()) - 4
    # Flip a bit in metadata or payload (a flipped metadataSize is a size error).
    pos = data.draw(st.integers(signed_from + 4, len(encoded) - 1))
    encoded[pos] ^= 1 << data.draw(st.integers(0, 7))
    decoder = FrameDecoder()
    decoder.receive_data(bytes(encoded) + PING)
    frame = decoder.next_frame()
    assert not frame.checksum_ok
    with pytest.raises(ChecksumMismatch):
        frame.verify()
    assert decoder.next_frame().command.type == pb.BaseCommand.PING

    strict = FrameDecoder(strict_checksum=True)
    strict.receive_data(bytes(encoded) + PING)
    with pytest.raises(ChecksumMismatch):
        strict.next_frame()
    assert strict.next_frame().command.type == pb.BaseCommand.PING


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 300), max_size=5))
def test_garbage_only_raises_codec_errors(garbage, cuts):
    decoder = FrameDecoder(max_frame_size=4096)
    try:
        points = sorted({c % (len(garbage) + 1) for c in cuts} | {0, len(garbage)})
        for a, b in zip(points, points[1:]):
            decoder.receive_data(garbage[a:b])
            while True:
                try:
                    if decoder.next_frame() is None:
                        break
                except PulsarCodecError as exc:
                    if exc.fatal:
                        raise
        decoder.receive_eof()
        decoder.next_frame()
    except PulsarCodecError:
        pass
