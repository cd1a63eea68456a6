"""Produce responses written by hand: byte for byte what ``kio`` writes, in every version served."""

from __future__ import annotations

import dataclasses
import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode

from nereus.codec.kafka import SUPPORTED, encode_response, make, nested
from nereus.codec.kafka.produce_response import encode
from nereus.codec.kafka.protocol import RequestHead, encode_response_chunks, response_schema

PRODUCE_VERSIONS = range(SUPPORTED[0][1], SUPPORTED[0][2] + 1)


def response(version: int, *, stamp=None, throttle_ms: int = 0):
    cls = response_schema(0, version)
    topic_cls, part_cls = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    errors_cls = nested(cls, "BatchIndexAndErrorMessage") if version >= 8 else None
    record_errors = (make(errors_cls, batch_index=3, batch_index_error_message="no key"),
                     make(errors_cls, batch_index=7, batch_index_error_message=None)) if errors_cls else ()
    parts = (make(part_cls, index=0, error_code=ErrorCode.none, base_offset=1 << 40, log_append_time=stamp,
                  log_start_offset=5, record_errors=(), error_message=None),
             make(part_cls, index=2, error_code=ErrorCode.invalid_record, base_offset=-1, log_append_time=None,
                  log_start_offset=-1, record_errors=record_errors, error_message="résumé of the failure"))
    topics = (make(topic_cls, name="orders", topic_id=uuid.UUID(int=99), partition_responses=parts),
              make(topic_cls, name="ÿ-empty", topic_id=None, partition_responses=()))
    return make(cls, responses=topics, throttle_time=datetime.timedelta(milliseconds=throttle_ms))


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@pytest.mark.parametrize("stamp", [None, datetime.datetime(2026, 11, 29, 8, 30, 1, 123456, tzinfo=datetime.timezone.utc)])
@pytest.mark.parametrize("throttle_ms", [0, 1234])
def test_same_bytes_as_kio(version, stamp, throttle_ms):
    body = response(version, stamp=stamp, throttle_ms=throttle_ms)
    head = RequestHead(api_key=0, api_version=version, correlation_id=2**31 - 5, client_id="c")
    assert encode(head.correlation_id, version, body) == encode_response(head, body)
    assert b"".join(encode_response_chunks(head, body)) == encode_response(head, body)


@pytest.mark.parametrize("version", [v for v in PRODUCE_VERSIONS if v >= 10])
def test_tagged_fields_set_are_left_to_kio(version):
    body = response(version)
    topic = body.responses[0]
    part = topic.partition_responses[0]
    leader = dataclasses.replace(part.current_leader, leader_id=2, leader_epoch=9)
    moved = dataclasses.replace(body, responses=(dataclasses.replace(topic, partition_responses=(
        dataclasses.replace(part, error_code=ErrorCode.not_leader_or_follower, current_leader=leader),)),))
    assert encode(1, version, moved) is None
    head = RequestHead(api_key=0, api_version=version, correlation_id=1, client_id=None)
    assert b"".join(encode_response_chunks(head, moved)) == encode_response(head, moved)
