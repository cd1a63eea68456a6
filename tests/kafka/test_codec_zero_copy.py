"""Produce requests read with views of their batches, Fetch responses written as chunks: both
byte for byte what ``kio`` reads and writes, in every version the broker serves."""

from __future__ import annotations

import dataclasses
import datetime
import io
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from nereus.codec.kafka import SUPPORTED, MalformedRequest, decode_request, encode_response, make, nested
from nereus.codec.kafka.fetch_response import RecordChunks
from nereus.codec.kafka.protocol import RequestHead, encode_response_chunks, request_schema, response_schema

PRODUCE_VERSIONS = range(SUPPORTED[0][1], SUPPORTED[0][2] + 1)
FETCH_VERSIONS = range(SUPPORTED[1][1], SUPPORTED[1][2] + 1)


def produce_frame(version: int, client_id: str | None = "cli") -> tuple[bytes, object]:
    cls = request_schema(0, version)
    topic, part = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    req = cls(transactional_id="tx" if version % 2 else None, acks=-1, timeout=datetime.timedelta(milliseconds=1500),
              topic_data=(make(topic, name="t1", topic_id=uuid.UUID(int=7),
                               partition_data=(part(index=0, records=b"abc" * 50), part(index=3, records=None))),
                          make(topic, name="tÿ", topic_id=None, partition_data=())))
    header = HeaderV2 if cls.__flexible__ else HeaderV1
    buf = io.BytesIO()
    entity_writer(header)(buf, header(request_api_key=0, request_api_version=version, correlation_id=7,
                                      client_id=client_id))
    entity_writer(cls)(buf, req)
    return buf.getvalue(), req


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("client_id", ["cli", None])
def test_produce_reads_as_kio_does_with_records_as_views_of_the_frame(version, client_id):
    frame, sent = produce_frame(version, client_id)
    head, req = decode_request(memoryview(frame))
    header_cls = HeaderV2 if type(sent).__flexible__ else HeaderV1
    header, pos = entity_reader(header_cls)(frame, 0)
    assert req == entity_reader(type(sent))(frame, pos)[0] == sent
    assert (head.api_key, head.api_version, head.correlation_id, head.client_id) == (0, version, 7, client_id)
    records = req.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview) and records.obj is frame


@pytest.mark.parametrize("version", [3, 9])
def test_a_truncated_produce_is_malformed_at_every_length(version):
    frame, _ = produce_frame(version)
    for cut in range(len(frame)):
        with pytest.raises(MalformedRequest):
            decode_request(frame[:cut])


def test_a_produce_count_larger_than_the_frame_is_refused_before_reading():
    frame, _ = produce_frame(3)
    pos = frame.index(b"\x00\x00\x00\x02\x00\x02t1")  # the topic count, then the first name
    with pytest.raises(MalformedRequest, match="overruns"):
        decode_request(frame[:pos] + b"\x7f\xff\xff\xff" + frame[pos + 4:])


def fetch_response(version: int):
    cls = response_schema(1, version)
    topic, part, txn = nested(cls, "FetchableTopicResponse"), nested(cls, "PartitionData"), \
        nested(cls, "AbortedTransaction")
    tagged = {"current_leader": nested(cls, "LeaderIdAndEpoch")(leader_id=3, leader_epoch=5)} if version >= 12 else {}
    parts = (make(part, partition_index=1, error_code=ErrorCode.none, high_watermark=100, last_stable_offset=90,
                  log_start_offset=2, aborted_transactions=(txn(producer_id=5, first_offset=9),),
                  preferred_read_replica=-1, records=b"x" * 300, **tagged),
             make(part, partition_index=2, error_code=ErrorCode.offset_out_of_range, high_watermark=-1,
                  last_stable_offset=-1, aborted_transactions=None, records=None),
             make(part, partition_index=4, error_code=ErrorCode.none, high_watermark=10, last_stable_offset=10,
                  aborted_transactions=(), preferred_read_replica=2, records=b""))
    endpoints = {"node_endpoints": (nested(cls, "NodeEndpoint")(node_id=3, host="h", port=9092),)} if version >= 16 else {}
    return make(cls, throttle_time=datetime.timedelta(milliseconds=12), error_code=ErrorCode.none, session_id=4,
                responses=(make(topic, topic="topic", topic_id=uuid.UUID(int=5), partitions=parts),
                           make(topic, topic="e", topic_id=None, partitions=())), **endpoints)


def as_chunks(response):
    """The response with each partition's records as RecordChunks of views."""
    def chunked(p):
        if not p.records:
            return p
        view = memoryview(p.records)
        return dataclasses.replace(p, records=RecordChunks([view[:7], b"", view[7:100], view[100:]]))
    return dataclasses.replace(response, responses=tuple(
        dataclasses.replace(t, partitions=tuple(chunked(p) for p in t.partitions)) for t in response.responses))


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_fetch_writes_what_kio_writes_with_the_records_spliced_in(version):
    head = RequestHead(1, version, 99, None)
    response = fetch_response(version)
    expected = encode_response(head, response)
    assert b"".join(encode_response_chunks(head, response)) == expected
    chunks = encode_response_chunks(head, as_chunks(response))
    assert b"".join(chunks) == expected
    records = response.responses[0].partitions[0].records
    assert any(isinstance(c, memoryview) and c.obj is records for c in chunks)  # referenced, not copied


def test_record_chunks_count_and_compare_as_the_bytes_they_stand_for():
    chunks = RecordChunks([b"ab", memoryview(b"cde")])
    chunks.extend([bytearray(b"f")])
    assert len(chunks) == 6 and bytes(chunks) == b"abcdef" and chunks == b"abcdef" and not RecordChunks()
