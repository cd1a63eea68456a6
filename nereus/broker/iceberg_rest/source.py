"""What the Iceberg REST catalog serves, read where it is kept.

Namespaces are Pulsar's: tenants and their namespaces, from the metadata plane
(``ledger.policies``' keys), so a namespace exists as soon as Pulsar's does, table or
not. Tables are the SBT catalog's (``sbt_catalog.py``: the compaction worker's
SQL catalog), named ``(tenant, namespace, topic)`` by ``lakehouse.sbt``: one table
per topic, a partitioned topic's partitions being one column of it. A table's
metadata is its current metadata file as pyiceberg reads it, serialized as pyiceberg
writes it. Catalog reads block (SQLite, files): they run in a worker thread.
"""

from __future__ import annotations

import asyncio

from ...ledger.policies import POLICIES_ROOT, TENANTS_ROOT, policies_key, tenant_key
from ...meta import InvalidRequest, MetadataStore
from ..admin.common import list_children
from . import sbt_catalog
from .protocol import unavailable

NO_EXTRA = "the lakehouse extra is not installed on this broker (pip install 'nereus[lakehouse]'): no tables"


class Source:
    """The namespaces of ``meta`` and the built-in tables of the catalog at ``tables``
    (``sbt_catalog.CatalogLocation``; None: no tables)."""

    def __init__(self, meta: MetadataStore, tables) -> None:
        self.meta = meta
        self.tables = tables

    async def tenants(self) -> list[str]:
        return sorted(await list_children(self.meta, TENANTS_ROOT))

    async def namespaces(self, tenant: str) -> list[str]:
        return sorted(await list_children(self.meta, f"{POLICIES_ROOT}/{tenant}"))

    async def exists(self, levels: tuple[str, ...]) -> bool:
        """Is ``levels`` a tenant (one level) or a tenant's namespace (two)?"""
        keys = {1: tenant_key, 2: policies_key}
        if len(levels) not in keys:
            return False
        try:
            return await self.meta.get(keys[len(levels)](*levels)) is not None
        except InvalidRequest:  # a name no key may hold (a NUL in it): no namespace has it
            return False

    def _catalog(self):
        if not sbt_catalog.has_pyiceberg():
            raise unavailable(NO_EXTRA)
        return sbt_catalog.existing(self.tables)

    async def table_names(self, levels: tuple[str, ...]) -> list[str]:
        """Topics of the namespace ``[tenant, namespace]`` that have a built-in table."""
        catalog = self._catalog()
        if catalog is None or len(levels) != 2:
            return []
        return await asyncio.to_thread(_table_names, catalog, levels)

    async def load(self, levels: tuple[str, ...], name: str) -> tuple[str, str] | None:
        """(metadata location, metadata JSON) of the table's current version; None if there is no such table."""
        catalog = self._catalog()
        if catalog is None or len(levels) != 2:
            return None
        return await asyncio.to_thread(_load, catalog, (*levels, name))


def _table_names(catalog, levels: tuple[str, ...]) -> list[str]:
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        return sorted(ident[-1] for ident in catalog.list_tables(levels))
    except NoSuchNamespaceError:  # no table of this namespace was synced yet
        return []


def _load(catalog, ident: tuple[str, ...]) -> tuple[str, str] | None:
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        table = catalog.load_table(ident)
    except (NoSuchTableError, NoSuchNamespaceError):
        return None
    return table.metadata_location, table.metadata.model_dump_json()


__all__ = ["NO_EXTRA", "Source"]
