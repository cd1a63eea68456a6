"""HTTP authorization of the admin API and HTTP lookup, as Pulsar's web service decides.

With ``authorizationEnabled`` (after authentication gave the request a role):

- superusers may call everything;
- creating, updating and deleting tenants, listing them, the brokers' and the
  console's calls are for superusers only; any role may list the clusters and read
  their failure domains, but a cluster's data (which may carry the credentials a
  replicator presents there) and its writes are for superusers, as in Pulsar;
- a tenant's admins may call everything under their tenant;
- other roles may read a topic (lookup, stats, metadata: GET) when they may produce
  to or consume from it; any role may look up the transaction coordinators' topic.

Refused: 401 with Pulsar's ``{"reason": ...}`` body (as Pulsar's admin API answers).
"""

from __future__ import annotations

import logging
import re

from aiohttp import web

from ..ledger.naming import InvalidTopicName, TopicName
from ..pulsar.server.transactions import is_tc_topic
from .authentication import ROLE

log = logging.getLogger(__name__)

AUTHORIZER = web.AppKey("nereus_authorizer", object)
_CHECKED = ("/admin/", "/lookup/", "/console/api/")
_OPEN_READS = ("/admin/v2/clusters",)
#: Under ``_OPEN_READS``, what only superusers read: a cluster's data and its peers.
_CLUSTER_DATA = re.compile(r"^/admin/v2/clusters/[^/]+(/peers)?/?$")


def _refused(request: web.Request, role, reason: str) -> web.Response:
    log.info("HTTP %s %s by role %s refused: %s", request.method, request.path, role, reason)
    return web.json_response({"reason": reason}, status=401)


def _topic(request: web.Request) -> TopicName | None:
    m = request.match_info
    domain = m.get("domain") or ("non-persistent" if request.path.startswith("/admin/v2/non-persistent/")
                                 else "persistent")
    try:
        return TopicName.parse(f"{domain}://{m['tenant']}/{m['namespace']}/{m['topic']}")
    except InvalidTopicName:
        return None


def _finds_coordinator(request: web.Request, topic: TopicName) -> bool:
    return is_tc_topic(topic) and (request.path.startswith("/lookup/") or request.path.endswith("/partitions"))


@web.middleware
async def authorize(request: web.Request, handler):
    if not request.path.startswith(_CHECKED) or ROLE not in request:
        return await handler(request)
    authorizer = request.app[AUTHORIZER]
    role = request[ROLE]
    if authorizer.is_super_user(role):
        return await handler(request)
    tenant = request.match_info.get("tenant")
    if tenant is None or request.path.startswith("/console/"):
        if request.method == "GET" and request.path.startswith(_OPEN_READS) and \
                not _CLUSTER_DATA.match(request.path):
            return await handler(request)
        return _refused(request, role, "This operation requires super-user access")
    if request.path.startswith("/admin/v2/tenants/") and request.method != "GET":
        return _refused(request, role, "This operation requires super-user access")
    if await authorizer.is_tenant_admin(role, tenant):
        return await handler(request)
    topic = _topic(request) if "topic" in request.match_info else None
    if topic is not None and request.method == "GET" and _finds_coordinator(request, topic):
        return await handler(request)  # any role with transactions looks its coordinator up
    if topic is not None and request.method == "GET" and await authorizer.allowed(role, topic, None):
        return await handler(request)
    return _refused(request, role, "Don't have permission to administrate resources on this tenant")


def install(app: web.Application, authorizer) -> None:
    """Check roles' permissions right after authentication (before the admin handlers and routing)."""
    app[AUTHORIZER] = authorizer
    app.middlewares.insert(1, authorize)


__all__ = ["AUTHORIZER", "authorize", "install"]
