"""The broker's HTTP listener: health, Prometheus metrics, the admin API and Pulsar's HTTP lookup (``admin/``),
the console and the Iceberg REST catalog of the topics' tables (``iceberg_rest/``)."""

from __future__ import annotations

import logging

from aiohttp import http_exceptions, web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from ..http_limits import GuardedSite
from ..net_limits import ConnectionLimits
from . import admin, authentication, authorization, console, iceberg_rest
from .admin import health


class _BadRequestsInOneLine(logging.Filter):
    """aiohttp logs every unparsable request with a traceback at ERROR; a malformed or hostile
    client gets a 400 and one warning line instead, so it cannot flood the log with tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, http_exceptions.HttpProcessingError):
            record.msg, record.args = "http: bad request answered %s: %s", (exc.code, exc.message.splitlines()[0])
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


_bad_requests_filter = _BadRequestsInOneLine()


async def _metrics(_request: web.Request) -> web.Response:
    body = generate_latest(REGISTRY)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _principal(request: web.Request):
    """(authorizer, role) of an authenticated request when authorization is on, else (None, role)."""
    authorizer = request.app.get(authorization.AUTHORIZER)
    role = request.get(authentication.ROLE)
    return (authorizer, role) if authentication.ROLE in request else (None, role)


def build_app(authenticator=None, authorizer=None) -> web.Application:
    app = web.Application()
    if authenticator is not None:  # first: no handler nor other middleware runs for an unauthenticated request
        authentication.install(app, authenticator)
        if authorizer is not None:
            authorization.install(app, authorizer)
    health.register(app)
    app.router.add_get("/metrics", _metrics)
    admin.register(app)
    console.register(app)
    iceberg_rest.register(app, _principal)
    return app


async def start_http(host: str, port: int, *, authenticator=None, authorizer=None,
                     limits: ConnectionLimits | None = None) -> web.AppRunner:
    """Start serving; returns the runner to ``cleanup()`` at shutdown.

    The admin API answers 503 until ``attach_admin`` gives it the running services;
    ``limits``: connections per IP and the request header timeout (``nereus.http_limits``).
    """
    server_log = logging.getLogger("aiohttp.server")
    if _bad_requests_filter not in server_log.filters:
        server_log.addFilter(_bad_requests_filter)
    runner = web.AppRunner(build_app(authenticator, authorizer), access_log=None)
    await runner.setup()
    await GuardedSite(runner, host, port, limits=limits or ConnectionLimits(protocol="http")).start()
    return runner


async def add_https(runner: web.AppRunner, host: str, port: int, context,
                    limits: ConnectionLimits | None = None) -> int:
    """Serve the same application over HTTPS on ``host:port`` too (``context``: the server's SSLContext).

    Returns the bound port.
    """
    before = {address[1] for address in runner.addresses}
    await GuardedSite(runner, host, port, ssl_context=context,
                      limits=limits or ConnectionLimits(protocol="http")).start()
    return port or next(address[1] for address in runner.addresses if address[1] not in before)


async def attach_admin(runner: web.AppRunner, *, storage, meta, pulsar, node=None) -> None:
    """Serve the admin API over the running storage, metadata store, PulsarService and broker node."""
    await admin.attach(runner.app, storage=storage, meta=meta, pulsar=pulsar, node=node)
    console.attach(runner.app)
