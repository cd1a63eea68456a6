"""Storage, ownership and metadata errors as each protocol's error code: one table per protocol."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from nereus.kafka.server.catalog.catalog import TopicError
from nereus.kafka.server.catalog.errors import kafka_error
from nereus.meta.errors import MetadataError
from nereus.codec.pulsar import pb
from nereus.pulsar.server.errors import pulsar_error
from nereus.pulsar.server.existence import TopicMissing
from nereus.pulsar.server.txn_sends import TxnSendRefused
from nereus.storage import (AppendSessionLost, CorruptObject, OffsetOutOfRange, StorageError, StreamFenced,
                            StreamNotFound)
from nereus.topics import NotOwner
from nereus.topics.topic import TopicUnloaded

CASES = [
    # (exception, Kafka code, Pulsar code)
    (StreamFenced("fenced"), ErrorCode.not_leader_or_follower, pb.ServiceNotReady),
    (AppendSessionLost("lost"), ErrorCode.not_leader_or_follower, pb.ServiceNotReady),
    (NotOwner("elsewhere"), ErrorCode.not_leader_or_follower, pb.ServiceNotReady),
    (TopicUnloaded("unloaded"), ErrorCode.not_leader_or_follower, pb.ServiceNotReady),
    (OffsetOutOfRange("below"), ErrorCode.offset_out_of_range, pb.PersistenceError),
    (StreamNotFound("gone"), ErrorCode.unknown_topic_or_partition, pb.TopicNotFound),
    (CorruptObject("bad"), ErrorCode.kafka_storage_error, pb.PersistenceError),
    (StorageError("io"), ErrorCode.kafka_storage_error, pb.PersistenceError),
    (MetadataError("down"), ErrorCode.kafka_storage_error, pb.MetadataError),
    (asyncio.TimeoutError(), ErrorCode.request_timed_out, pb.UnknownError),
    (ValueError("?"), ErrorCode.unknown_server_error, pb.UnknownError),
]


@pytest.mark.parametrize(("exc", "kafka", "pulsar"), CASES, ids=lambda v: type(v).__name__)
def test_each_error_has_one_code_per_protocol(exc, kafka, pulsar):
    assert kafka_error(exc) == kafka
    assert pulsar_error(exc) == pulsar


def test_a_default_stands_for_what_the_table_does_not_know():
    assert kafka_error(ValueError(), default=ErrorCode.kafka_storage_error) == ErrorCode.kafka_storage_error
    assert pulsar_error(ValueError(), default=pb.PersistenceError) == pb.PersistenceError
    assert kafka_error(StreamFenced(), default=ErrorCode.kafka_storage_error) == ErrorCode.not_leader_or_follower


def test_errors_that_name_their_own_code_keep_it():
    assert kafka_error(TopicError(36, "exists")) == ErrorCode.topic_already_exists
    assert pulsar_error(TopicMissing("no such topic")) == pb.TopicNotFound
    assert pulsar_error(TxnSendRefused("refused")) == pb.NotAllowedError
