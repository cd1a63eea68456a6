"""Metadata responses written by hand: byte for byte what ``kio`` writes, in every version served."""

from __future__ import annotations

import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode

from nereus.codec.kafka import SUPPORTED, encode_response, make, nested
from nereus.codec.kafka.metadata_response import encode
from nereus.codec.kafka.protocol import RequestHead, encode_response_chunks, response_schema

METADATA_VERSIONS = range(SUPPORTED[3][1], SUPPORTED[3][2] + 1)
NO_OPERATIONS = -2147483648


def response(version: int, *, throttle_ms: int = 0, cluster_id: str | None = "clüster", rack: str | None = "zone-a"):
    cls = response_schema(3, version)
    broker_cls = nested(cls, "MetadataResponseBroker")
    topic_cls, part_cls = nested(cls, "MetadataResponseTopic"), nested(cls, "MetadataResponsePartition")
    brokers = (make(broker_cls, node_id=0, host="127.0.0.1", port=9092, rack=rack),
               make(broker_cls, node_id=70000, host="bröker-b", port=65535, rack=None))
    parts = (make(part_cls, error_code=ErrorCode.none, partition_index=0, leader_id=70000, leader_epoch=3,
                  replica_nodes=(70000, 0), isr_nodes=(70000,), offline_replicas=()),
             make(part_cls, error_code=ErrorCode.leader_not_available, partition_index=1, leader_id=-1,
                  leader_epoch=2**31 - 1, replica_nodes=(), isr_nodes=(), offline_replicas=(5, 6)))
    many = tuple(make(part_cls, error_code=ErrorCode.none, partition_index=i, leader_id=i % 3, leader_epoch=i,
                      replica_nodes=tuple(range(i % 4)), isr_nodes=(i % 3,), offline_replicas=())
                 for i in range(200))
    topics = (make(topic_cls, error_code=ErrorCode.none, name="orders", topic_id=uuid.UUID(int=2**128 - 7),
                   is_internal=False, partitions=parts, topic_authorized_operations=NO_OPERATIONS),
              make(topic_cls, error_code=ErrorCode.none, name="wide", topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, "w"),
                   is_internal=True, partitions=many, topic_authorized_operations=248),
              make(topic_cls, error_code=ErrorCode.unknown_topic_id, name=None if version >= 12 else "",
                   topic_id=uuid.UUID(int=1), is_internal=False, partitions=(),
                   topic_authorized_operations=NO_OPERATIONS),
              make(topic_cls, error_code=ErrorCode.unknown_topic_or_partition, name="ÿ-gone", topic_id=uuid.UUID(int=0),
                   is_internal=False, partitions=(), topic_authorized_operations=NO_OPERATIONS))
    return make(cls, throttle_time=datetime.timedelta(milliseconds=throttle_ms), brokers=brokers, cluster_id=cluster_id,
                controller_id=70000, topics=topics, cluster_authorized_operations=NO_OPERATIONS,
                error_code=ErrorCode.unknown_server_error)  # v13+


@pytest.mark.parametrize("version", METADATA_VERSIONS)
@pytest.mark.parametrize("throttle_ms", [0, 1234])
@pytest.mark.parametrize("cluster_id,rack", [("clüster", "zone-a"), (None, None)])
def test_same_bytes_as_kio(version, throttle_ms, cluster_id, rack):
    body = response(version, throttle_ms=throttle_ms, cluster_id=cluster_id, rack=rack)
    head = RequestHead(api_key=3, api_version=version, correlation_id=2**31 - 5, client_id="c")
    assert encode(head.correlation_id, version, body) == encode_response(head, body)
    assert b"".join(encode_response_chunks(head, body)) == encode_response(head, body)


@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_no_topics_and_no_brokers(version):
    cls = response_schema(3, version)
    body = make(cls, throttle_time=datetime.timedelta(0), brokers=(), cluster_id=None, controller_id=-1, topics=(),
                cluster_authorized_operations=NO_OPERATIONS, error_code=ErrorCode.none)
    head = RequestHead(api_key=3, api_version=version, correlation_id=0, client_id=None)
    assert encode(0, version, body) == encode_response(head, body)
