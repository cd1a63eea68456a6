"""The Iceberg REST catalog's HTTP handlers (aiohttp): reads answered, writes refused.

Every handler answers in the spec's shapes, errors included, itself: the admin API's
error middleware, which wraps every route of the listener, formats Pulsar's
``{"reason"}`` bodies, which Iceberg clients cannot read.
"""

from __future__ import annotations

import functools
import logging

from aiohttp import web

from ..admin.common import CONTEXT
from . import protocol
from .access import Access
from .protocol import IcebergError, forbidden, no_such_namespace, no_such_table, parse_namespace
from .source import Source

log = logging.getLogger(__name__)


def _error(request: web.Request, status: int, kind: str, message: str) -> web.Response:
    if request.method == "HEAD":  # HEAD answers carry no body
        return web.Response(status=status)
    return web.json_response(protocol.error_body(status, kind, message), status=status)


def answers(handler):
    """Run ``handler`` with the request's Access; any failure answered in the spec's error model."""
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            ctx = request.app[CONTEXT]
            if not ctx.ready:
                raise protocol.unavailable("The broker is not ready")
            return await handler(request, Access(request, Source(ctx.meta, ctx.sbt_catalog)))
        except IcebergError as exc:
            return _error(request, exc.status, exc.kind, exc.message)
        except Exception as exc:
            log.exception("iceberg %s %s failed", request.method, request.path)
            return _error(request, 500, "InternalServerError", f"{type(exc).__name__}: {exc}")
    return wrapped


async def _visible_namespace(request: web.Request, access: Access) -> tuple[str, ...]:
    """The path's namespace; 404 when it does not exist, 403 when the role may not see it."""
    levels = parse_namespace(request.match_info["namespace"])
    if not await access.source.exists(levels):
        raise no_such_namespace(levels)
    if not await access.sees(levels):
        raise forbidden(f"Not authorized to see namespace {'.'.join(levels)}")
    return levels


@answers
async def get_config(_request: web.Request, _access: Access) -> web.Response:
    return web.json_response(protocol.config())


@answers
async def list_namespaces(request: web.Request, access: Access) -> web.Response:
    parent = parse_namespace(request.query.get("parent"))
    if not parent:
        candidates = [(tenant,) for tenant in await access.source.tenants()]
    elif not await access.source.exists(parent):
        raise no_such_namespace(parent)
    elif len(parent) == 1:
        candidates = [(parent[0], ns) for ns in await access.source.namespaces(parent[0])]
    else:
        candidates = []  # a Pulsar namespace holds no namespaces
    return web.json_response(protocol.namespaces([ns for ns in candidates if await access.sees(ns)]))


@answers
async def load_namespace(request: web.Request, access: Access) -> web.Response:
    levels = await _visible_namespace(request, access)
    return web.json_response(protocol.namespace(levels, {}))


@answers
async def namespace_exists(request: web.Request, access: Access) -> web.Response:
    await _visible_namespace(request, access)
    return web.Response(status=204)


@answers
async def list_tables(request: web.Request, access: Access) -> web.Response:
    levels = await _visible_namespace(request, access)
    return web.json_response(protocol.tables(levels, await access.tables(levels)))


async def _readable_table(request: web.Request, access: Access) -> tuple[tuple[str, ...], str, tuple[str, str]]:
    levels = await _visible_namespace(request, access)
    name = request.match_info["table"]
    loaded = await access.source.load(levels, name)
    if loaded is None:
        raise no_such_table(levels, name)
    if not await access.reads_table(*levels, name):
        raise forbidden(f"Not authorized to read table {'.'.join((*levels, name))}")
    return levels, name, loaded


@answers
async def load_table(request: web.Request, access: Access) -> web.Response:
    _levels, _name, (location, metadata) = await _readable_table(request, access)
    tag = protocol.etag(location)
    if tag in request.headers.get("If-None-Match", ""):
        return web.Response(status=304, headers={"ETag": tag})
    body = protocol.load_table(location, metadata, request.query.get("snapshots"))
    return web.json_response(body, headers={"ETag": tag})


@answers
async def table_exists(request: web.Request, access: Access) -> web.Response:
    await _readable_table(request, access)
    return web.Response(status=204)


@answers
async def report_metrics(request: web.Request, access: Access) -> web.Response:
    """A scan's metrics report (clients may send one after reading): taken and dropped."""
    await _readable_table(request, access)
    return web.Response(status=204)


@answers
async def other(request: web.Request, _access: Access) -> web.Response:
    """Any other call: writes refused (read-only), other reads unsupported, as the spec answers them."""
    if request.path.endswith("/v1/oauth/tokens"):  # OAuth2's own error shape, which clients read there
        return web.json_response({"error": "invalid_request", "error_description": protocol.NO_OAUTH}, status=400)
    if request.method not in ("GET", "HEAD"):
        raise forbidden(protocol.READ_ONLY)
    raise IcebergError(406, "UnsupportedOperationException",
                       f"This catalog does not serve {request.method} {request.path}: see GET /iceberg/v1/config")


__all__ = ["get_config", "list_namespaces", "list_tables", "load_namespace", "load_table", "namespace_exists",
           "other", "report_metrics", "table_exists"]
