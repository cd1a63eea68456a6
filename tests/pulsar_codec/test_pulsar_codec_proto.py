"""The protocol definition: wire facts, generated code freshness, sans-io rule."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from nereus.codec.pulsar import body, pb, type_name, wrap

CODEC_DIR = pathlib.Path(__file__).resolve().parents[2] / "nereus" / "codec" / "pulsar"

# A sample of wire facts (field numbers / enum values) that clients depend on;
# a typo in PulsarApi.proto would break compatibility silently.
FIELD_NUMBERS = {
    "BaseCommand": {
        "type": 1,
        "connect": 2,
        "send": 6,
        "message": 9,
        "ack": 10,
        "ping": 18,
        "lookupTopic": 23,
        "getSchema": 34,
        "ackResponse": 38,
        "newTxn": 50,
        "watchTopicList": 64,
        "topicMigrated": 68,
    },
    "CommandConnect": {
        "client_version": 1,
        "auth_method": 2,
        "auth_data": 3,
        "protocol_version": 4,
        "auth_method_name": 5,
        "feature_flags": 10,
        "proxy_version": 11,
    },
    "CommandConnected": {"server_version": 1, "protocol_version": 2, "max_message_size": 3, "feature_flags": 4},
    "FeatureFlags": {
        "supports_auth_refresh": 1,
        "supports_broker_entry_metadata": 2,
        "supports_partial_producer": 3,
        "supports_topic_watchers": 4,
    },
    "MessageIdData": {
        "ledgerId": 1,
        "entryId": 2,
        "partition": 3,
        "batch_index": 4,
        "ack_set": 5,
        "batch_size": 6,
        "first_chunk_message_id": 7,
    },
    "MessageMetadata": {
        "producer_name": 1,
        "sequence_id": 2,
        "publish_time": 3,
        "compression": 8,
        "uncompressed_size": 9,
        "num_messages_in_batch": 11,
        "event_time": 12,
        "schema_version": 16,
        "ordering_key": 18,
        "txnid_least_bits": 22,
        "highest_sequence_id": 24,
        "uuid": 26,
        "chunk_id": 29,
        "null_partition_key": 30,
    },
    "SingleMessageMetadata": {
        "properties": 1,
        "partition_key": 2,
        "payload_size": 3,
        "sequence_id": 8,
        "null_partition_key": 10,
    },
    "CommandSubscribe": {
        "subType": 3,
        "consumer_id": 4,
        "request_id": 5,
        "initialPosition": 13,
        "keySharedMeta": 17,
        "consumer_epoch": 19,
    },
    "KeySharedMeta": {"keySharedMode": 1, "hashRanges": 3, "allowOutOfOrderDelivery": 4},
    "CommandLookupTopicResponse": {
        "brokerServiceUrl": 1,
        "response": 3,
        "request_id": 4,
        "proxy_through_service_url": 8,
    },
    "CommandSend": {
        "producer_id": 1,
        "sequence_id": 2,
        "num_messages": 3,
        "highest_sequence_id": 6,
        "is_chunk": 7,
        "marker": 8,
        "message_id": 9,
    },
    "CommandAck": {"ack_type": 2, "message_id": 3, "validation_error": 4, "request_id": 8},
    "CommandConsumerStats": {"request_id": 1, "consumer_id": 4},
    "Schema": {"name": 1, "schema_data": 3, "type": 4, "properties": 5},
}
ENUMS = {
    "CompressionType": {"NONE": 0, "LZ4": 1, "ZLIB": 2, "ZSTD": 3, "SNAPPY": 4},
    "ServerError": {"UnknownError": 0, "ChecksumError": 9, "TopicNotFound": 11, "ProducerFenced": 25},
    "ProtocolVersion": {"v6": 6, "v20": 20, "v21": 21},
    "KeySharedMode": {"AUTO_SPLIT": 0, "STICKY": 1},
}


@pytest.mark.parametrize("message", list(FIELD_NUMBERS))
def test_field_numbers(message):
    fields = getattr(pb, message).DESCRIPTOR.fields_by_name
    assert {name: fields[name].number for name in FIELD_NUMBERS[message]} == FIELD_NUMBERS[message]


@pytest.mark.parametrize("enum", list(ENUMS))
def test_enum_values(enum):
    values = getattr(pb, enum)
    assert {name: values.Value(name) for name in ENUMS[enum]} == ENUMS[enum]


def test_every_sub_command_field_matches_its_type():
    types = pb.BaseCommand.Type
    for field in pb.BaseCommand.DESCRIPTOR.fields:
        if field.name != "type":
            assert types.Name(field.number)  # raises if no such type
    assert len(types.values()) == len(pb.BaseCommand.DESCRIPTOR.fields) - 1


def test_wrap_and_body():
    cmd = wrap(pb.CommandFlow(consumer_id=3, messagePermits=10))
    assert cmd.type == pb.BaseCommand.FLOW and body(cmd).messagePermits == 10
    assert type_name(cmd.type) == "FLOW" and type_name(999) == "UNKNOWN(999)"
    with pytest.raises(TypeError):
        wrap(pb.MessageMetadata())


def test_generated_code_is_fresh(tmp_path):
    pytest.importorskip("grpc_tools")
    root = CODEC_DIR.parents[2]
    rel = "nereus/codec/pulsar/PulsarApi.proto"
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"--python_out={tmp_path}", f"{root}/{rel}"],
        check=True,
    )
    fresh = (tmp_path / rel).with_name("PulsarApi_pb2.py").read_text()
    assert fresh == (CODEC_DIR / "PulsarApi_pb2.py").read_text(), "run nereus/codec/pulsar/regen.sh"


def test_codec_does_no_io():
    banned = re.compile(r"^\s*(import|from)\s+(asyncio|socket|selectors|ssl|trio|anyio)\b", re.M)
    for path in CODEC_DIR.glob("*.py"):
        assert not banned.search(path.read_text()), path.name
