"""Where the broker finds its topics' built-in (SBT) tables: the compaction worker's catalog.

The broker's compaction worker (``nereus compact`` without ``--catalog``) keeps the
tables in an Iceberg SQL catalog on SQLite, ``iceberg/catalog.db`` beside a ``file://``
object store; the console and the Iceberg REST catalog read that one. An object store
that is not ``file://`` has no catalog the broker knows of. pyiceberg (the lakehouse
extra) is imported only when a catalog is opened.
"""

from __future__ import annotations

import functools
import importlib.util
import os

from ...lakehouse import sbt


def catalog_location(objects) -> tuple[str, str] | None:
    """(catalog URI, warehouse) of the default SBT catalog of this object store; None if it has none."""
    root = getattr(objects, "root", None)
    if root is None:
        return None
    path = os.path.join(os.path.dirname(root.rstrip(os.sep)), "iceberg", "catalog.db")
    return "sqlite:///" + path, "file://" + root.rstrip("/") + "/iceberg"


@functools.lru_cache(maxsize=4)
def catalog(uri: str, warehouse: str):
    """The SBT catalog at ``uri`` (opened once per process)."""
    return sbt.open_catalog(uri, warehouse)


def has_pyiceberg() -> bool:
    return importlib.util.find_spec("pyiceberg") is not None


def existing(objects):
    """The SBT catalog of this object store if the worker created it already (and pyiceberg is here), else None.

    Opening a SQL catalog creates its database: a reader must not be the one that does.
    """
    location = catalog_location(objects)
    if location is None or not has_pyiceberg() or not os.path.exists(location[0][len("sqlite:///"):]):
        return None
    return catalog(*location)


__all__ = ["catalog", "catalog_location", "existing", "has_pyiceberg"]
