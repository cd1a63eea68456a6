"""The Iceberg REST catalog's wire shapes, sans-io: names in paths, errors, answers.

Rules of the spec this module keeps (Apache Iceberg's ``rest-catalog-open-api.yaml``):

- a multi-level namespace travels in a path segment or in ``parent`` as its levels
  joined by the unit separator (``0x1F``, ``%1F`` once URL-encoded); an empty
  ``parent`` means none;
- every error is ``{"error": {"message", "type", "code"}}`` with ``code`` the HTTP
  status; ``type`` names the Java exception a client maps it to;
- ``GET /v1/config`` lists the endpoints the server serves, so clients never try
  one it does not (writes: this catalog is read-only);
- without pagination, ``next-page-token`` is left out and everything is answered.

Pulsar's ``tenant/namespace`` is the Iceberg namespace ``[tenant, namespace]``
(``[tenant]`` is its parent); a topic's table is named by the topic's local name.
"""

from __future__ import annotations

import hashlib
import json

SEPARATOR = "\x1f"

#: What this server serves (``"METHOD /v1/{prefix}/path"``, as the spec spells them).
ENDPOINTS = (
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
)

READ_ONLY = ("this catalog is read-only: the broker serves its topics' built-in tables, which only its "
             "compaction job writes (produce to the topic instead)")

NO_OAUTH = ("this catalog issues no tokens: send the broker's own credentials (a token as "
            "'Authorization: Bearer <token>', pyiceberg's token= property)")


class IcebergError(Exception):
    """An answer in the spec's error model: ``status`` with ``kind`` as the error's ``type``."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.message = message


def no_such_namespace(namespace: tuple[str, ...]) -> IcebergError:
    return IcebergError(404, "NoSuchNamespaceException", f"Namespace does not exist: {'.'.join(namespace)}")


def no_such_table(namespace: tuple[str, ...], table: str) -> IcebergError:
    return IcebergError(404, "NoSuchTableException", f"Table does not exist: {'.'.join((*namespace, table))}")


def forbidden(message: str) -> IcebergError:
    return IcebergError(403, "ForbiddenException", message)


def unavailable(message: str) -> IcebergError:
    return IcebergError(503, "ServiceUnavailableException", message)


def error_body(status: int, kind: str, message: str) -> dict:
    return {"error": {"message": message, "type": kind, "code": status}}


def parse_namespace(text: str | None) -> tuple[str, ...]:
    """Levels of a namespace as sent (already URL-decoded); ``()`` for none. Empty levels are refused."""
    if not text:
        return ()
    levels = tuple(text.split(SEPARATOR))
    if any(not level for level in levels):
        raise IcebergError(400, "BadRequestException", f"Namespace has an empty level: {text!r}")
    return levels


def config() -> dict:
    """``GET /v1/config``: no defaults or overrides (no prefix, the default separator), the endpoints."""
    return {"defaults": {}, "overrides": {}, "endpoints": list(ENDPOINTS)}


def namespaces(children: list[tuple[str, ...]]) -> dict:
    return {"namespaces": [list(ns) for ns in children]}


def namespace(levels: tuple[str, ...], properties: dict[str, str]) -> dict:
    return {"namespace": list(levels), "properties": properties}


def tables(levels: tuple[str, ...], names: list[str]) -> dict:
    return {"identifiers": [{"namespace": list(levels), "name": name} for name in names]}


def etag(metadata_location: str) -> str:
    """A table's ETag: its metadata file, which every commit replaces (so a new file is a new version)."""
    return '"' + hashlib.sha256(metadata_location.encode()).hexdigest()[:32] + '"'


def load_table(metadata_location: str, metadata_json: str, snapshots: str | None) -> dict:
    """``loadTable``'s answer; ``snapshots="refs"`` keeps only the snapshots a branch or tag names."""
    if snapshots not in (None, "all", "refs"):
        raise IcebergError(400, "BadRequestException", f"snapshots must be all or refs, not {snapshots!r}")
    metadata = json.loads(metadata_json)
    if snapshots == "refs":
        named = {ref["snapshot-id"] for ref in (metadata.get("refs") or {}).values()}
        metadata["snapshots"] = [s for s in metadata.get("snapshots") or () if s["snapshot-id"] in named]
    return {"metadata-location": metadata_location, "metadata": metadata, "config": {}}


__all__ = ["ENDPOINTS", "NO_OAUTH", "READ_ONLY", "SEPARATOR", "IcebergError", "config", "error_body", "etag", "forbidden",
           "load_table", "namespace", "namespaces", "no_such_namespace", "no_such_table", "parse_namespace",
           "tables", "unavailable"]
