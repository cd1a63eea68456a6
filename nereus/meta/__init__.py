"""Nereus metadata plane: Oxia's data model behind one async ``MetadataStore`` API.

Backends: ``embedded`` (in-process engine, ``open_engine``); an ``oxia://`` client
will plug into ``connect`` later.
"""

from __future__ import annotations

from .api import (
    EXPECT_ABSENT,
    Comparison,
    MetadataStore,
    Notification,
    NotificationStream,
    NotificationType,
    PutResult,
    Record,
    Version,
)
from .cas import update
from .errors import (
    InvalidRequest,
    KeyNotFound,
    MetadataClosed,
    MetadataError,
    MetadataUnavailable,
    NamespaceNotFound,
    SessionNotFound,
    UnexpectedVersion,
)
from .embedded import Engine


def open_engine(data_dir: str | None, shards: int = 4, **options: object) -> Engine:
    """Open the embedded engine on ``data_dir`` (None: in memory).

    Use as ``async with open_engine(...) as engine`` or ``await engine.close()``.
    Options are passed to ``Engine`` (``namespaces``, ``clock``, ...).
    """
    return Engine(data_dir, shards=shards, **options)  # type: ignore[arg-type]


def connect(url: str, *, engine: Engine | None = None, namespace: str = "default",
            **options: object) -> MetadataStore:
    """A ``MetadataStore`` for ``url``.

    ``embedded`` / ``embedded:`` -> a client of ``engine`` (required; the caller owns
    and closes it). ``oxia://host:port`` is reserved for the Oxia-protocol backend.
    """
    scheme = url.split(":", 1)[0]
    if scheme == "embedded":
        if engine is None:
            raise InvalidRequest("connect('embedded') needs engine=open_engine(...)")
        return engine.client(namespace, **options)  # type: ignore[arg-type]
    if scheme == "oxia":
        raise NotImplementedError("the oxia:// backend is not implemented yet")
    raise InvalidRequest(f"unknown metadata URL {url!r}")


__all__ = [
    "EXPECT_ABSENT",
    "Comparison",
    "Engine",
    "InvalidRequest",
    "KeyNotFound",
    "MetadataClosed",
    "MetadataError",
    "MetadataStore",
    "MetadataUnavailable",
    "NamespaceNotFound",
    "Notification",
    "NotificationStream",
    "NotificationType",
    "PutResult",
    "Record",
    "SessionNotFound",
    "UnexpectedVersion",
    "Version",
    "connect",
    "open_engine",
    "update",
]
