"""The object-store layer: immutable objects behind one small async interface.

``open_object_store(url)`` picks the backend from the URL scheme:

- ``file:///abs/dir`` or a plain path: ``LocalObjectStore`` (default)
- ``memory://`` (private) or ``memory://name`` (shared within the process)
- ``s3://bucket[/prefix]``: ``S3ObjectStore`` (imports obstore only when used)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

from nereus.objstore.api import ObjectInfo, ObjectStore
from nereus.objstore.errors import (
    InvalidObjectKey,
    InvalidRange,
    ObjectExists,
    ObjectNotFound,
    ObjectStoreError,
    UnsupportedStoreUrl,
)
from nereus.objstore.local import LocalObjectStore
from nereus.objstore.memory import MemoryObjectStore

__all__ = [
    "InvalidObjectKey",
    "InvalidRange",
    "LocalObjectStore",
    "MemoryObjectStore",
    "ObjectExists",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectStore",
    "ObjectStoreError",
    "UnsupportedStoreUrl",
    "open_object_store",
]

_LOCAL_OPTIONS = frozenset({"io_threads", "temp_max_age"})
_SCHEMES = "file://, memory://, s3:// or a plain directory path"


def _check_options(url: str, options: dict[str, Any], known: frozenset[str]) -> None:
    unknown = set(options) - known
    if unknown:
        raise UnsupportedStoreUrl(f"unknown option(s) {sorted(unknown)} for {url!r}; known: {sorted(known)}")


def open_object_store(url: str, **options: Any) -> ObjectStore:
    """Open the store named by ``url``; ``options`` are backend-specific keyword options."""
    if not isinstance(url, str) or not url:
        raise UnsupportedStoreUrl(f"object store URL must be a non-empty string, got {url!r}")
    if "://" not in url:
        _check_options(url, options, _LOCAL_OPTIONS)
        return LocalObjectStore(url, **options)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path:
            raise UnsupportedStoreUrl(f"file URL {url!r} must name an absolute directory: file:///abs/dir")
        if parts.query or parts.fragment:
            raise UnsupportedStoreUrl(f"file URL {url!r} takes no query; pass options as keyword arguments")
        _check_options(url, options, _LOCAL_OPTIONS)
        return LocalObjectStore(unquote(parts.path), **options)
    if scheme == "memory":
        _check_options(url, options, frozenset())
        return MemoryObjectStore((parts.netloc + parts.path).strip("/") or None)
    if scheme == "s3":
        from nereus.objstore.s3 import S3ObjectStore  # keeps the SDK out of other imports

        return S3ObjectStore.from_url(url, **options)
    raise UnsupportedStoreUrl(f"unsupported object store URL {url!r}: scheme {parts.scheme!r} is not one of {_SCHEMES}")
