"""HTTP authentication: ``Authorization: Bearer <token>`` / ``Basic ...`` on the admin API.

As Pulsar's web service: with authentication enabled, the admin REST API, HTTP lookup,
the console's data and the Iceberg REST catalog need credentials (401 with a JSON
``reason`` otherwise; the catalog's in the Iceberg spec's error model);
``/metrics`` only with ``authenticateMetricsEndpoint``. The request's role is
``request[ROLE]`` for the handlers and for authorization.
"""

from __future__ import annotations

import logging

from aiohttp import web

from ..auth import AuthenticationFailed
from ..tls import peer_cert_cn

log = logging.getLogger(__name__)

AUTHENTICATOR = web.AppKey("nereus_authenticator", object)
ROLE = "nereus_role"
_PROTECTED = ("/admin/", "/lookup/", "/console/api/", "/iceberg/")


def _needs_credentials(request: web.Request, authenticator) -> bool:
    path = request.path
    if path.startswith(_PROTECTED):
        return True
    return path == "/metrics" or path.startswith("/metrics/") if authenticator.settings.authenticate_metrics \
        else False


def _unauthenticated(request: web.Request, message: str) -> web.Response:
    if request.path.startswith("/iceberg/"):  # Iceberg clients read the REST catalog spec's error model
        body = {"error": {"message": message, "type": "NotAuthorizedException", "code": 401}}
    else:
        body = {"reason": message}
    return web.json_response(body, status=401)


@web.middleware
async def authenticate(request: web.Request, handler):
    authenticator = request.app[AUTHENTICATOR]
    if not _needs_credentials(request, authenticator):
        return await handler(request)
    peer_cn = peer_cert_cn(request.transport)
    try:
        identity = authenticator.authenticate_http(request.headers.get("Authorization"), peer_cn=peer_cn)
    except AuthenticationFailed as exc:
        log.info("HTTP %s %s from %s refused: %s", request.method, request.path, request.remote, exc)
        return _unauthenticated(request, f"Authentication required: {exc}")
    request[ROLE] = identity.role
    return await handler(request)


def install(app: web.Application, authenticator) -> None:
    """Check credentials on ``app``'s protected paths before any other middleware."""
    app[AUTHENTICATOR] = authenticator
    app.middlewares.insert(0, authenticate)


__all__ = ["AUTHENTICATOR", "ROLE", "authenticate", "install"]
