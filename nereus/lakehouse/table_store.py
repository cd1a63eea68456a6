"""The object store as Iceberg sees it: where the built-in tables' files are, and how to reach them.

A built-in (SBT) table lists the compacted objects where the store keeps them, so its
readers reach the same store. A ``file://`` store's objects are local paths. An ``s3://``
store's objects are ``s3://bucket/prefix/key``: the store URL without its query, whose
connection options (endpoint, region, credentials; else the ``AWS_*`` variables, as the
store itself takes them) become pyiceberg's ``s3.*`` FileIO properties. The tables'
metadata files go below ``iceberg/`` in the same store (the catalog's warehouse).
"""

from __future__ import annotations

import os
from urllib.parse import quote, urlsplit

#: S3 store options (``objstore.s3``) -> pyiceberg FileIO properties.
_S3_PROPERTIES = {"endpoint": "s3.endpoint", "region": "s3.region", "access_key_id": "s3.access-key-id",
                  "secret_access_key": "s3.secret-access-key", "session_token": "s3.session-token"}


def base_url(objects_url: str) -> str:
    """The store's URL without its options (a query may hold credentials, and is no part of a path)."""
    return objects_url.partition("?")[0].rstrip("/")


def object_url(objects_url: str, key: str) -> str:
    """Where a table reader finds the object ``key`` of the store at ``objects_url``."""
    return f"{base_url(objects_url)}/{quote(key)}"


def warehouse(objects_url: str) -> str:
    """Where the built-in tables' metadata files go: ``iceberg/`` in the same store."""
    return base_url(objects_url) + "/iceberg"


def default_catalog_uri(objects_url: str) -> str | None:
    """The built-in tables' catalog beside a ``file://`` store, ``sqlite:///{store}/../iceberg/catalog.db``;
    None for other stores (their broker is told where: ``--sbt-catalog``)."""
    from urllib.request import url2pathname

    parts = urlsplit(objects_url)
    if parts.scheme != "file":
        return None
    root = os.path.dirname(os.path.abspath(url2pathname(parts.path)).rstrip(os.sep))
    return "sqlite:///" + os.path.join(root, "iceberg", "catalog.db")


def file_io_properties(objects_url: str) -> dict[str, str]:
    """pyiceberg FileIO properties that reach the store at ``objects_url`` (none for ``file://``)."""
    if urlsplit(objects_url).scheme != "s3":
        return {}
    from ..objstore.s3 import url_options

    return {_S3_PROPERTIES[name]: value for name, value in url_options(objects_url).items() if name in _S3_PROPERTIES}


__all__ = ["base_url", "default_catalog_uri", "file_io_properties", "object_url", "warehouse"]
