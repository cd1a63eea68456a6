"""Opening Iceberg catalogs and creating namespaces and tables when several jobs may race to do it."""

from __future__ import annotations


def load_catalog(name: str, **properties):
    """pyiceberg's ``load_catalog``, safe when another job opens the same new SQL catalog.

    A SQL catalog creates its own tables when first opened; two jobs doing that at
    once make one of them fail with the database's "table ... already exists". The
    table is there by then: opening again goes on to the next one, which another job
    may be creating as well, so a job tries once per table the catalog has, and more.
    """
    from pyiceberg.catalog import load_catalog as _load

    for _ in range(_OPEN_ATTEMPTS - 1):
        try:
            return _load(name, **properties)
        except Exception as exc:
            if "already exists" not in str(exc):
                raise
    return _load(name, **properties)


#: Attempts to open a new SQL catalog (it creates two tables; each may be lost to a racing job).
_OPEN_ATTEMPTS = 5


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
