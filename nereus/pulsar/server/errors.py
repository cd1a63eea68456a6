"""Errors of the Pulsar listener, and the one translation of storage, ownership and metadata
errors into Pulsar ServerError codes.

ServiceNotReady makes the official clients look the topic up again (it moved, unloaded, or
this broker lost its metadata session); PersistenceError makes a producer resend. An
exception of the listener's own may name its code (``server_error``).
"""

from __future__ import annotations

from ...meta.errors import MetadataError
from ...storage import StorageError, StreamFenced, StreamNotFound
from ...codec.pulsar import pb


class ProtocolViolation(Exception):
    """The client broke the protocol (command out of order, unknown id): the connection is closed."""


#: Most specific first: the first class ``exc`` is an instance of gives the code.
_TABLE: tuple[tuple[type[BaseException], int], ...] = (
    (StreamFenced, pb.ServiceNotReady),  # unloaded, moved, lost session (NotOwner too)
    (StreamNotFound, pb.TopicNotFound),
    (StorageError, pb.PersistenceError),
    (MetadataError, pb.MetadataError),
)


def pulsar_error(exc: BaseException, default: int = pb.UnknownError) -> int:
    """The ServerError a client should get for ``exc`` (an exception may name its own: ``server_error``;
    ``default`` for what the table does not know)."""
    own = getattr(exc, "server_error", None)
    if own is not None:
        return own
    for cls, code in _TABLE:
        if isinstance(exc, cls):
            return code
    return default


__all__ = ["ProtocolViolation", "pulsar_error"]
