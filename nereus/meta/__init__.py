"""Nereus metadata plane: Oxia's data model behind one async ``MetadataStore`` API.

Backends: ``embedded`` (in-process engine, ``open_engine``) and ``oxia://`` (a gRPC
client of any Oxia-protocol server, e.g. ``nereus oxia``).
"""

from __future__ import annotations

from .api import (
    EXPECT_ABSENT,
    Comparison,
    MetadataStore,
    Notification,
    NotificationStream,
    NotificationType,
    PutOp,
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

    * ``embedded`` with ``engine=``: a client of that engine (the caller closes it);
    * ``embedded:///abs/data/dir`` or ``embedded://`` (in memory) without ``engine``:
      opens a private engine that the returned client closes with itself;
    * ``oxia://host:port[/namespace]``: an ``OxiaMetadataStore`` of that server;
      ``oxia+tls://host:port[/namespace][?trust=FILE&cert=FILE&key=FILE]`` over TLS (``oxia/tls.py``).

    ``options`` go to ``Engine.client`` (``identity``, ``session_timeout``) or to
    ``OxiaMetadataStore`` (also ``retry_timeout``, ``max_inflight``).
    """
    scheme, _, rest = url.partition(":")
    if scheme == "embedded":
        owned = engine is None
        if owned:
            path = rest[2:] if rest.startswith("//") else rest
            engine = Engine(path or None)
        client = engine.client(namespace, **options)  # type: ignore[arg-type]
        client.owns_engine = owned
        return client
    if scheme in ("oxia", "oxia+tls"):
        from .oxia.client import OxiaMetadataStore
        from .oxia.tls import tls_of_url

        if not rest.startswith("//") or len(rest) <= 2:
            raise InvalidRequest(f"oxia URL must look like {scheme}://host:port[/namespace], not {url!r}")
        rest, _, query = rest.partition("?")
        address, _, path = rest[2:].partition("/")
        return OxiaMetadataStore(address, path.strip("/") or namespace, tls=tls_of_url(scheme, query),
                                 **options)  # type: ignore[arg-type]
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
    "PutOp",
    "PutResult",
    "Record",
    "SessionNotFound",
    "UnexpectedVersion",
    "Version",
    "connect",
    "open_engine",
    "update",
]
