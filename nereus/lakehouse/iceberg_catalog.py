"""Creating Iceberg namespaces and tables when several jobs may race to do it."""

from __future__ import annotations


def ensure_table(catalog, identifier, schema, properties: dict[str, str] | None = None):
    """Load ``identifier``, creating it (and its namespace) if missing: ``(table, created)``.

    Another job may create either at the same moment; SQL catalogs then raise their
    database's unique-key error rather than "already exists", so any failure is
    checked against what the catalog now holds before it is raised.
    """
    namespace = catalog.identifier_to_tuple(identifier)[:-1]
    if catalog.table_exists(identifier):
        return catalog.load_table(identifier), False
    try:
        catalog.create_namespace_if_not_exists(namespace)
    except Exception:
        if not catalog.namespace_exists(namespace):
            raise
    try:
        return catalog.create_table(identifier, schema=schema, properties=properties or {}), True
    except Exception:
        if not catalog.table_exists(identifier):
            raise
        return catalog.load_table(identifier), False
