"""Storage, ownership and metadata errors as Kafka error codes: the one translation at the edge.

Handlers catch what they expect and ask ``kafka_error`` for the code; what a client does
with each code is Kafka's (NOT_LEADER_OR_FOLLOWER: refresh metadata and retry elsewhere,
KAFKA_STORAGE_ERROR: retry, OFFSET_OUT_OF_RANGE: apply auto.offset.reset, ...).
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from ....meta.errors import MetadataError
from ....storage import OffsetOutOfRange, StorageError, StreamFenced, StreamNotFound
from .catalog import TopicError

#: Most specific first: the first class ``exc`` is an instance of gives the code.
_TABLE: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (StreamFenced, ErrorCode.not_leader_or_follower),  # unloaded, moved, lost session (NotOwner too)
    (OffsetOutOfRange, ErrorCode.offset_out_of_range),
    (StreamNotFound, ErrorCode.unknown_topic_or_partition),
    (StorageError, ErrorCode.kafka_storage_error),
    (MetadataError, ErrorCode.kafka_storage_error),  # the metadata plane is storage too: retriable
    (asyncio.TimeoutError, ErrorCode.request_timed_out),
)


def kafka_error(exc: BaseException, default: ErrorCode = ErrorCode.unknown_server_error) -> ErrorCode:
    """The Kafka error code a client should get for ``exc`` (``default`` for what the table does not know)."""
    if isinstance(exc, TopicError):
        return ErrorCode(exc.code)
    for cls, code in _TABLE:
        if isinstance(exc, cls):
            return code
    return default


__all__ = ["kafka_error"]
