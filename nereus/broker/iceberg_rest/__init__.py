"""An Iceberg REST catalog of the topics' built-in tables, at ``/iceberg`` on the broker's HTTP port.

``http://HOST:HTTP_PORT/iceberg`` is the catalog URI any Iceberg client (pyiceberg,
Spark, Trino, DuckDB) is given: the REST catalog API of Apache Iceberg's OpenAPI
spec below it (``/iceberg/v1/config``, namespaces, tables, ``loadTable``), read-only.
Pulsar's tenants and namespaces are its namespaces, each topic's built-in (SBT)
table a table; the broker's authentication applies (``broker.authentication``), and
a role reads the tables of the topics it may consume (``access.py``).

protocol.py: the spec's shapes, sans-io; source.py: namespaces from the metadata
plane, tables from the SBT catalog (sbt_catalog.py: where the worker keeps it, which the
console reads too); access.py: what a role sees; handlers.py: the
routes' handlers.
"""

from __future__ import annotations

from aiohttp import web

from . import handlers
from .access import PRINCIPAL

ROOT = "/iceberg"
_NAMESPACE = ROOT + "/v1/namespaces/{namespace}"
_TABLE = _NAMESPACE + "/tables/{table}"


def register(app: web.Application, principal) -> None:
    """Add the catalog's routes (answered once the admin API is attached; 503 before).

    ``principal(request)``: ``(authorizer, role)`` of a request, the authorizer None when
    authorization is off (see ``access.py``).
    """
    app[PRINCIPAL] = principal
    router = app.router
    router.add_get(ROOT + "/v1/config", handlers.get_config)
    router.add_get(ROOT + "/v1/namespaces", handlers.list_namespaces)
    # HEAD routes of their own: the spec's exists-checks answer 204, not a GET's 200 without body.
    router.add_get(_NAMESPACE, handlers.load_namespace, allow_head=False)
    router.add_head(_NAMESPACE, handlers.namespace_exists)
    router.add_get(_NAMESPACE + "/tables", handlers.list_tables)
    router.add_get(_TABLE, handlers.load_table, allow_head=False)
    router.add_head(_TABLE, handlers.table_exists)
    router.add_post(_TABLE + "/metrics", handlers.report_metrics)
    router.add_route("*", ROOT + "{rest:(/.*)?}", handlers.other)  # last: whatever the routes above do not take


__all__ = ["ROOT", "register"]
