"""Fuzz targets shared by the suite's short runs and ``bench/fuzz.py``'s long ones.

Each target pairs a hypothesis strategy of hostile inputs (random bytes and
mutations of well-formed ones: flipped bytes, truncations, huge length fields)
with a ``check`` that feeds one input to a parser and lets through only the
parser's documented error. Anything else escaping ``check`` is a bug.
"""

from __future__ import annotations

import datetime
import io
import struct
from dataclasses import dataclass
from typing import Any, Callable

import crc32c
import pyarrow as pa
from hypothesis import strategies as st
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_writer

from nereus.codec.kafka import InvalidBatch, MalformedRequest, decode_request, peek_head, split_batches, supported
from nereus.codec.kafka.protocol import request_schema
from nereus.codec.kafka.records import Record, build_batch, decode_records
from nereus.codec.pulsar import (FrameDecoder, PulsarCodecError, compress, encode_command, encode_payload_command,
                                 entry_messages, pb, split_entry, wrap)
from nereus.codec.pulsar.batch import build_batch as build_pulsar_batch
from nereus.storage import compacted_format, wal_format
from nereus.storage.errors import CorruptObject

# Small limits so "a length prefix of gigabytes" is cheap to express and must be
# refused before anything is allocated for it.
PULSAR_MAX_FRAME = 64 * 1024


@dataclass(frozen=True)
class Target:
    """One fuzz target: its inputs and the call that must fail only cleanly."""

    name: str
    inputs: st.SearchStrategy
    check: Callable[[Any], None]


def _mutated(seeds: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """Well-formed bytes with a few hostile edits, or plain random bytes."""

    @st.composite
    def mutate(draw) -> bytes:
        data = bytearray(draw(seeds))
        for _ in range(draw(st.integers(0, 4))):
            edit = draw(st.sampled_from(["flip", "truncate", "u32", "insert", "delete"]))
            pos = draw(st.integers(0, max(len(data) - 1, 0)))
            if edit == "flip" and data:
                data[pos] ^= draw(st.integers(1, 255))
            elif edit == "truncate":
                del data[pos:]
            elif edit == "u32" and len(data) >= 4:
                pos = min(pos, len(data) - 4)
                value = draw(st.sampled_from([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 31 - 1, len(data)]))
                data[pos:pos + 4] = struct.pack(">I", value)
            elif edit == "insert":
                data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
            elif edit == "delete":
                del data[pos:pos + draw(st.integers(1, 16))]
        return bytes(data)

    return st.one_of(mutate(), st.binary(max_size=256))


# -- Pulsar frames ---------------------------------------------------------------

_TEXT = st.text(max_size=12)
_pulsar_commands = st.one_of(
    st.builds(lambda v: encode_command(wrap(pb.CommandConnect(client_version=v, protocol_version=21))), _TEXT),
    st.builds(lambda c, n: encode_command(wrap(pb.CommandFlow(consumer_id=c, messagePermits=n))),
              st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1)),
    st.builds(lambda r, t: encode_command(wrap(pb.CommandLookupTopic(request_id=r, topic=t))),
              st.integers(0, 2**64 - 1), _TEXT),
    st.just(encode_command(wrap(pb.CommandPing()))),
)


def _send_frame(payload: bytes, batched: bool, compression: int, with_bem: bool) -> bytes:
    meta = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    if batched:
        parts, _ = build_pulsar_batch([(payload, pb.SingleMessageMetadata(payload_size=len(payload))),
                                       (payload[:3], None)])
        payload = b"".join(bytes(p) for p in parts)
        meta.num_messages_in_batch = 2
    meta.compression = compression
    meta.uncompressed_size = len(payload)
    if compression:
        payload = compress(compression, payload)
    bem = pb.BrokerEntryMetadata(broker_timestamp=1, index=5) if with_bem else None
    send = wrap(pb.CommandSend(producer_id=1, sequence_id=1, num_messages=2 if batched else 1))
    return b"".join(bytes(p) for p in encode_payload_command(send, meta, payload,
                                                                      broker_entry_metadata=bem))


_pulsar_frames = st.one_of(
    _pulsar_commands,
    st.builds(_send_frame, st.binary(min_size=3, max_size=64), st.booleans(), st.sampled_from([0, 1, 2, 3, 4]), st.booleans()),
)
pulsar_stream = st.tuples(
    st.lists(_mutated(_pulsar_frames), min_size=1, max_size=4).map(b"".join),
    st.lists(st.integers(1, 64), max_size=8),  # receive_data chunk sizes
)


def check_pulsar_stream(case: tuple[bytes, list[int]]) -> None:
    """Decode a hostile byte stream as a broker does; only PulsarCodecError may escape."""
    stream, cuts = case
    decoder = FrameDecoder(PULSAR_MAX_FRAME)
    pos = 0
    for cut in cuts + [len(stream)]:
        decoder.receive_data(stream[pos:pos + cut])
        pos += cut
        while True:
            try:
                frame = decoder.next_frame()
            except PulsarCodecError as exc:
                if exc.fatal:
                    return
                continue
            if frame is None:
                break
            _use_pulsar_frame(frame)
    decoder.receive_eof()
    try:
        list(decoder)
    except PulsarCodecError:
        pass


def _use_pulsar_frame(frame) -> None:
    assert decoder_buffer_is_bounded(frame)
    if frame.entry is None:
        return
    try:
        frame.broker_entry_metadata
        meta = frame.metadata
        frame.verify()
        meta, payload = split_entry(frame.entry)
        entry_messages(meta, payload)
    except PulsarCodecError:
        pass


def decoder_buffer_is_bounded(frame) -> bool:
    return frame.entry is None or frame.entry.nbytes <= PULSAR_MAX_FRAME


# -- Kafka requests ---------------------------------------------------------------

def _kafka_frame(api_key: int, version: int, body: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(HeaderV2)(buf, HeaderV2(request_api_key=api_key, request_api_version=version,
                                          correlation_id=7, client_id="c"))
    entity_writer(request_schema(api_key, version))(buf, body)
    return buf.getvalue()


def _kafka_seeds() -> list[bytes]:
    # Requests the official clients send first and most: api versions, metadata,
    # produce (with a record batch), fetch; built once, mutated per example.
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import Records, i16, i32

    batch = bytes(build_batch([Record(0, 1, b"k", b"v", [("h", b"x")])]))
    produce = ProduceRequest(transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(seconds=1), topic_data=(
        TopicProduceData(name="t", partition_data=(PartitionProduceData(index=i32(0), records=Records(batch)),)),))
    metadata = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="t"),),
                               allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    return [
        _kafka_frame(18, 3, ApiVersionsRequest(client_software_name="c", client_software_version="1")),
        _kafka_frame(3, 12, metadata),
        _kafka_frame(0, 9, produce),
    ]


_KAFKA_SEEDS = _kafka_seeds()
kafka_request = _mutated(st.sampled_from(_KAFKA_SEEDS))


def check_kafka_request(frame: bytes) -> None:
    """Decode a hostile request body as the connection does; only MalformedRequest may escape."""
    try:
        head = peek_head(frame)
    except MalformedRequest:
        return
    if not supported(head.api_key, head.api_version):
        return
    try:
        _head, request = decode_request(frame)
    except MalformedRequest:
        return
    for topic in getattr(request, "topic_data", None) or ():
        for part in topic.partition_data or ():
            if part.records is None:
                continue
            try:
                for _header, batch in split_batches(part.records):
                    decode_records(batch, limit=1 << 20)
            except InvalidBatch:
                pass


# -- Storage objects ---------------------------------------------------------------

_entries = st.lists(st.tuples(st.integers(1, 5), st.binary(max_size=24)), min_size=1, max_size=4)
_wal_objects = st.builds(
    lambda slices: b"".join(bytes(c) for c in wal_format.encode_object(
        [(sid, entries) for sid, entries in enumerate(slices)]).chunks),
    st.lists(_entries, min_size=1, max_size=3))


@st.composite
def _forged_wal_objects(draw) -> bytes:
    """Objects whose directory checksum is right but whose slice ranges lie."""
    body = draw(st.binary(max_size=96))
    end = wal_format.HEADER_SIZE + len(body)
    slices = []
    for _ in range(draw(st.integers(1, 3))):
        # Ranges inside the slice area, often short and near its end (reaching into the directory).
        pos = draw(st.one_of(st.integers(0, end), st.integers(max(end - 40, 0), end)))
        slices.append((draw(st.integers(0, 3)), pos, draw(st.integers(0, max(end - pos, 0)))))
    head = struct.pack(">4sHHII", wal_format.MAGIC, wal_format.FORMAT_VERSION, 0, len(slices), 0)
    directory = b"".join(struct.pack(">QQI", *s) for s in slices)
    return (head + body + directory
            + struct.pack(">II4s", len(slices), crc32c.crc32c(directory), wal_format.END_MAGIC))


wal_object = st.one_of(_mutated(_wal_objects), _forged_wal_objects())


def check_wal_object(data: bytes) -> None:
    """Read a hostile WAL object as a reader does; only CorruptObject may escape."""
    try:
        layouts = wal_format.decode_directory(data)
    except CorruptObject:
        return
    for layout in layouts:
        try:
            wal_format.decode_slice(data[layout.position:layout.position + layout.length], layout.stream_id)
        except CorruptObject:
            pass


def _compacted(entries: list[tuple[int, bytes]]) -> bytes:
    records = sum(n for n, _ in entries)
    table = pa.table(compacted_format.entry_columns([entries]))
    header = compacted_format.CompactedHeader(7, 100, records, len(entries), 1)
    return compacted_format.encode(table, header)


_COMPACTED_SEEDS = [_compacted([(1, b"a"), (2, b"bb")]), _compacted([(3, b"x" * 40)])]
compacted_object = _mutated(st.sampled_from(_COMPACTED_SEEDS))


def check_compacted_object(data: bytes) -> None:
    """Read a hostile compacted object as a reader does; only CorruptObject may escape."""
    try:
        header = compacted_format.read_header(data)
        compacted_format.decode_entries(data, header.stream_id, header.first, header.records)
    except CorruptObject:
        pass


CODEC_TARGETS = [
    Target("pulsar-frames", pulsar_stream, check_pulsar_stream),
    Target("kafka-requests", kafka_request, check_kafka_request),
    Target("wal-objects", wal_object, check_wal_object),
    Target("compacted-objects", compacted_object, check_compacted_object),
]
