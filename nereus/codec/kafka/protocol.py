"""Kafka requests and responses as typed objects (``kio`` schemas), no I/O.

A frame is ``size i32 | request header | body``. The header version follows the
body: flexible versions use header v2 (with tagged fields), others v1. Responses
use header v1 for flexible versions, v0 otherwise, except ApiVersions whose
response header is always v0 (clients parse it before knowing our versions).
"""

from __future__ import annotations

import datetime
import functools
import io
import struct
from dataclasses import dataclass
from typing import Any

from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from .bounds import LengthError, check_frame
from .fetch_response import FETCH, encode_fetch_response
from .produce_request import PRODUCE, decode_produce
from .produce_response import encode as encode_produce_response
from .metadata_response import encode as encode_metadata_response
from .schemas import MalformedRequest, has, make, module_of, nested, request_schema, response_schema

_API = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")

# API key -> (name, min version, max version) we serve. Upper bounds stop before
# versions that need features we do not have (topic ids in Produce/Fetch v13+ and
# OffsetFetch v10).
SUPPORTED: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 13),
    1: ("Fetch", 4, 17),
    2: ("ListOffsets", 1, 10),
    3: ("Metadata", 1, 13),
    8: ("OffsetCommit", 2, 9),
    9: ("OffsetFetch", 1, 9),
    10: ("FindCoordinator", 0, 5),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 6),
    16: ("ListGroups", 0, 5),
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 5),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 4),
    23: ("OffsetForLeaderEpoch", 2, 4),
    24: ("AddPartitionsToTxn", 0, 4),
    25: ("AddOffsetsToTxn", 0, 3),
    26: ("EndTxn", 0, 3),
    27: ("WriteTxnMarkers", 1, 2),
    28: ("TxnOffsetCommit", 0, 3),
    29: ("DescribeAcls", 1, 3),
    30: ("CreateAcls", 1, 3),
    31: ("DeleteAcls", 1, 3),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    34: ("AlterReplicaLogDirs", 1, 2),
    35: ("DescribeLogDirs", 1, 4),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    43: ("ElectLeaders", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    45: ("AlterPartitionReassignments", 0, 1),
    46: ("ListPartitionReassignments", 0, 0),
    47: ("OffsetDelete", 0, 0),
    48: ("DescribeClientQuotas", 0, 1),
    49: ("AlterClientQuotas", 0, 1),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    60: ("DescribeCluster", 0, 1),
    61: ("DescribeProducers", 0, 0),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 2),
    68: ("ConsumerGroupHeartbeat", 0, 1),
    69: ("ConsumerGroupDescribe", 0, 1),
    74: ("ListConfigResources", 0, 1),
    75: ("DescribeTopicPartitions", 0, 0),
    76: ("ShareGroupHeartbeat", 1, 1),
    77: ("ShareGroupDescribe", 1, 1),
    78: ("ShareFetch", 1, 2),
    79: ("ShareAcknowledge", 1, 2),
    90: ("DescribeShareGroupOffsets", 0, 1),
    91: ("AlterShareGroupOffsets", 0, 0),
    92: ("DeleteShareGroupOffsets", 0, 0),
}
API_VERSIONS = 18
METADATA = 3
#: A response's ``throttle_time`` when the request was not throttled.
NO_THROTTLE = datetime.timedelta(0)


@dataclass(frozen=True, slots=True)
class RequestHead:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def peek_head(frame: bytes | memoryview) -> RequestHead:
    """API key, version and correlation id (readable for any key/version)."""
    if len(frame) < _API.size:
        raise MalformedRequest("frame shorter than a request header")
    key, version, corr = _API.unpack_from(frame, 0)
    return RequestHead(key, version, corr, None)


def supported(api_key: int, version: int) -> bool:
    spec = SUPPORTED.get(api_key)
    return spec is not None and spec[1] <= version <= spec[2]


@functools.lru_cache(maxsize=None)
def _reader(cls):
    return entity_reader(cls)


@functools.lru_cache(maxsize=None)
def _writer(cls):
    return entity_writer(cls)


def decode_request(frame: bytes | memoryview) -> tuple[RequestHead, Any]:
    """(header, typed body) of a supported request; raises MalformedRequest.

    A Produce's ``records`` are views of ``frame`` (see produce_request.py)."""
    head = peek_head(frame)
    if head.api_key == PRODUCE and supported(PRODUCE, head.api_version):  # the layout produce_request.py reads
        client_id, body = decode_produce(frame)
        return RequestHead(head.api_key, head.api_version, head.correlation_id, client_id), body
    cls = request_schema(head.api_key, head.api_version)
    header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
    data = bytes(frame)
    try:
        # Lengths first: the reader allocates what a count claims before reading the elements.
        check_frame(cls, data, check_frame(header_cls, data, 0, header=True))
    except LengthError as exc:
        raise MalformedRequest(f"{SUPPORTED[head.api_key][0]} v{head.api_version}: {exc}") from None
    try:
        header, pos = _reader(header_cls)(data, 0)
        body, size = _reader(cls)(data, pos)
    except Exception as exc:  # the native reader raises several types on bad input
        raise MalformedRequest(f"{SUPPORTED[head.api_key][0]} v{head.api_version}: {exc}") from None
    return RequestHead(head.api_key, head.api_version, head.correlation_id, header.client_id), body


def encode_response(head: RequestHead, body: Any) -> bytes:
    """The whole response frame (size prefix included)."""
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    flexible = type(body).__flexible__
    if flexible and head.api_key != API_VERSIONS:
        _writer(ResponseHeaderV1)(buf, ResponseHeaderV1(correlation_id=head.correlation_id))
    else:
        _writer(ResponseHeaderV0)(buf, ResponseHeaderV0(correlation_id=head.correlation_id))
    _writer(type(body))(buf, body)
    size = buf.tell() - 4
    buf.seek(0)
    buf.write(_SIZE.pack(size))
    return buf.getvalue()  # the buffer itself, not a copy of it (no view of it was taken)


def encode_response_chunks(head: RequestHead, body: Any) -> list:
    """The whole response frame as chunks for ``writelines``: a Fetch's record batches are
    referenced, not copied (fetch_response.py)."""
    if head.api_key == FETCH:
        return encode_fetch_response(head.correlation_id, head.api_version, body)
    if head.api_key == METADATA:
        return [encode_metadata_response(head.correlation_id, head.api_version, body)]
    if head.api_key == PRODUCE:
        frame = encode_produce_response(head.correlation_id, head.api_version, body)
        if frame is not None:
            return [frame]
    return [encode_response(head, body)]


__all__ = ["API_VERSIONS", "MalformedRequest", "NO_THROTTLE", "RequestHead", "SUPPORTED", "decode_request", "encode_response",
           "encode_response_chunks", "has", "make", "module_of", "nested", "peek_head", "request_schema", "response_schema", "supported"]
