"""Where the broker finds its topics' built-in (SBT) tables: the compaction worker's catalog.

The broker's compaction worker keeps the tables in the catalog ``--sbt-catalog`` names
(an Iceberg SQL catalog by SQLAlchemy URL, or an Iceberg REST catalog), by default an
SQL catalog on SQLite, ``iceberg/catalog.db`` beside a ``file://`` object store (a
standalone on another store: in its data directory). The console and the Iceberg REST
catalog read that one. pyiceberg (the lakehouse extra) is imported only when a catalog
is opened.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass

from ...lakehouse import sbt, table_store

_SQLITE = "sqlite:///"


@dataclass(frozen=True)
class CatalogLocation:
    """The SBT catalog ``uri`` of the tables of the object store at ``objects_url``."""

    uri: str
    objects_url: str

    @property
    def exists(self) -> bool:
        """False for an SQLite catalog the worker has not created yet (opening it would create it:
        a reader must not be the one that does)."""
        return not self.uri.startswith(_SQLITE) or os.path.exists(self.uri[len(_SQLITE):])

    def open(self):
        """The catalog (opened once per process)."""
        return catalog(self.uri, self.objects_url)

    def __str__(self) -> str:
        return self.uri.partition("?")[0]  # a query may hold credentials


def location(objects_url: str, configured: str | None) -> CatalogLocation | None:
    """Where the SBT tables of the store at ``objects_url`` are: ``configured``, else the default."""
    uri = configured or table_store.default_catalog_uri(objects_url)
    return None if uri is None else CatalogLocation(uri, objects_url)


@functools.lru_cache(maxsize=4)
def catalog(uri: str, objects_url: str):
    """The SBT catalog at ``uri`` of the store at ``objects_url`` (opened once per process)."""
    return sbt.store_catalog(uri, objects_url)


def has_pyiceberg() -> bool:
    return importlib.util.find_spec("pyiceberg") is not None


def existing(where: CatalogLocation | None):
    """The SBT catalog at ``where`` if the worker created it already (and pyiceberg is here), else None."""
    if where is None or not has_pyiceberg() or not where.exists:
        return None
    return where.open()


__all__ = ["CatalogLocation", "catalog", "existing", "has_pyiceberg", "location"]
