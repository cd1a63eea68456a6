"""Conversions between Oxia's wire messages and the metadata-plane types.

Shared by the server and the client so that both validate requests the same way
and agree on what every status means.
"""

from __future__ import annotations

from ..api import Comparison, Notification, NotificationType, Record, Version
from ..errors import InvalidRequest
from ..keys import decode_key, encode_key  # noqa: F401 - decode_key re-exported for the client
from ..validation import (MAX_VALUE, check_deltas, check_expected, check_index_name,  # noqa: F401
                          check_indexes, check_key, check_page_size, check_value)
from .proto import client_pb2 as pb

#: gRPC metadata keys Oxia clients send along with their calls.
NAMESPACE_HEADER = "namespace"
SHARD_HEADER = "shard-id"

#: Error details (gRPC status messages) the client recognises. Oxia reports these
#: with codes above the standard gRPC range, which Python gRPC cannot surface, so
#: they travel as standard codes with these messages.
SESSION_NOT_FOUND = "oxia: session not found"
NAMESPACE_NOT_FOUND = "oxia: namespace not found"
INVALID_SESSION_TIMEOUT = "oxia: invalid session timeout"

#: Largest gRPC message either side accepts (a batch of puts, or one 8 MiB value).
MAX_MESSAGE = 32 << 20
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
]
#: A client's channels retry a lost connection at most every 2 s (gRPC's default backs off to
#: 2 minutes): a broker cut off from the metadata service is back within moments of the heal.
CLIENT_CHANNEL_OPTIONS = GRPC_OPTIONS + [
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
]

COMPARISON_TO_PB = {
    Comparison.EQUAL: pb.EQUAL, Comparison.FLOOR: pb.FLOOR, Comparison.CEILING: pb.CEILING,
    Comparison.LOWER: pb.LOWER, Comparison.HIGHER: pb.HIGHER,
}
PB_TO_COMPARISON = {v: k for k, v in COMPARISON_TO_PB.items()}
NOTIFICATION_TO_PB = {
    NotificationType.KEY_CREATED: pb.KEY_CREATED, NotificationType.KEY_MODIFIED: pb.KEY_MODIFIED,
    NotificationType.KEY_DELETED: pb.KEY_DELETED, NotificationType.KEY_RANGE_DELETED: pb.KEY_RANGE_DELETED,
}
PB_TO_NOTIFICATION = {v: k for k, v in NOTIFICATION_TO_PB.items()}


def check_range_bound(key: object) -> bytes:
    """Range bounds may be longer than stored keys: only their type and NULs matter."""
    if not isinstance(key, str):
        raise InvalidRequest(f"range bound must be a str, not {type(key).__name__}")
    if "\x00" in key:
        raise InvalidRequest("range bound must not contain NUL characters")
    return encode_key(key)


# --------------------------------------------------------------- versions
def version_to_pb(v: Version) -> pb.Version:
    msg = pb.Version(version_id=v.version_id, modifications_count=v.modifications_count,
                     created_timestamp=v.created_timestamp, modified_timestamp=v.modified_timestamp)
    if v.session_id is not None:
        msg.session_id = v.session_id
        msg.client_identity = v.client_identity or ""
    return msg


def version_from_pb(msg: pb.Version) -> Version:
    ephemeral = msg.HasField("session_id") and msg.session_id != 0
    return Version(msg.version_id, msg.modifications_count, msg.created_timestamp, msg.modified_timestamp,
                   msg.session_id if ephemeral else None,
                   msg.client_identity if ephemeral and msg.HasField("client_identity") else None)


def record_to_pb(rec: Record) -> pb.GetResponse:
    msg = pb.GetResponse(status=pb.OK, version=version_to_pb(rec.version), key=rec.key)
    if rec.value is not None:
        msg.value = rec.value
    return msg


def record_from_pb(msg: pb.GetResponse, key: str, include_value: bool) -> Record:
    return Record(msg.key if msg.HasField("key") else key,
                  (msg.value if msg.HasField("value") else b"") if include_value else None,
                  version_from_pb(msg.version))


def notification_from_pb(key: str, msg: pb.Notification) -> Notification:
    t = PB_TO_NOTIFICATION[msg.type]
    return Notification(t, key,
                        msg.version_id if msg.HasField("version_id") else None,
                        msg.key_range_last if msg.HasField("key_range_last") else None)
