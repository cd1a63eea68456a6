"""Conversions between Oxia's wire messages and the metadata-plane types.

Shared by the server and the client so that both validate requests the same way
and agree on what every status means.
"""

from __future__ import annotations

from typing import Sequence

from ..api import Comparison, Notification, NotificationType, Record, Version
from ..embedded.client import MAX_VALUE
from ..embedded.store import MAX_ENCODED_KEY
from ..errors import InvalidRequest
from ..keys import decode_key, encode_key  # noqa: F401 - decode_key re-exported for the client
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


def check_key(key: object, what: str = "key") -> bytes:
    """Validate a key and return its order-preserving encoding."""
    if not isinstance(key, str):
        raise InvalidRequest(f"{what} must be a str, not {type(key).__name__}")
    if "\x00" in key:
        raise InvalidRequest(f"{what} must not contain NUL characters")
    ekey = encode_key(key)
    if len(ekey) > MAX_ENCODED_KEY:
        raise InvalidRequest(f"{what} too long ({len(ekey)} encoded bytes > {MAX_ENCODED_KEY})")
    return ekey


def check_range_bound(key: object) -> bytes:
    """Range bounds may be longer than stored keys: only their type and NULs matter."""
    if not isinstance(key, str):
        raise InvalidRequest(f"range bound must be a str, not {type(key).__name__}")
    if "\x00" in key:
        raise InvalidRequest("range bound must not contain NUL characters")
    return encode_key(key)


def check_value(value: object) -> bytes:
    if not isinstance(value, bytes):
        if not isinstance(value, (bytearray, memoryview)):
            raise InvalidRequest(f"value must be bytes, not {type(value).__name__}")
        value = bytes(value)
    if len(value) > MAX_VALUE:
        raise InvalidRequest(f"value too large ({len(value)} > {MAX_VALUE} bytes)")
    return value


def check_expected(v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < -1:
        raise InvalidRequest(f"invalid expected_version_id {v!r}")
    return v


def check_deltas(deltas: Sequence[int] | None, partition_key: str | None,
                 expected: int | None) -> tuple[int, ...] | None:
    if deltas is None:
        return None
    out = tuple(deltas)
    if partition_key is None or expected is not None:
        raise InvalidRequest("sequence keys need a partition key and no expected version")
    if not out or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in out):
        raise InvalidRequest("sequence_key_deltas must be non-negative ints")
    if out[0] == 0:
        raise InvalidRequest("the first sequence key delta must be > 0")
    return out


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
