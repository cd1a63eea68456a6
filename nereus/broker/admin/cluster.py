"""The cluster over REST: Pulsar's ``/admin/v2/clusters`` and ``/admin/v2/brokers``, drain, and Nereus' view.

- ``GET /admin/v2/clusters``: ``[cluster name]``; ``GET /admin/v2/clusters/{cluster}``: its ClusterData
  (this broker's service URLs).
- ``GET /admin/v2/clusters/{cluster}/failureDomains[/{domain}]``: the zones as Pulsar's failure
  domains, each with its live brokers (``{"a": {"brokers": [...]}}``); zones are set per broker
  (``--zone``), so these are read-only.
- ``GET /admin/v2/brokers/{cluster}``: the live brokers as Pulsar names them (``host:httpPort``).
- ``GET /admin/v2/brokers/{cluster}/{broker}/ownedNamespaces``: the namespaces (one bundle each)
  of the topics that broker owns; asked of another broker, a 307 to that one.
- ``GET /admin/v2/brokers/version`` | ``/ready``: the Nereus version | ``ok`` once serving.
- ``GET /admin/v2/brokers/leaderBroker``: the holder of the ``gc`` lease. Nereus has no leader
  election: each cluster-wide worker has its own lease, and ``gc`` always runs.
- ``POST /admin/v2/brokers/drain`` | ``/undrain``: this broker hands every topic over and takes no
  new ones (the process keeps running) | takes topics again. ``POST /admin/v2/brokers/{cluster}/
  {broker}/drain`` | ``/undrain`` does it on any broker (forwarded to it). 204 once done.
- ``GET /admin/v2/nereus/cluster`` (Nereus): every broker's registration (name, node id, zone, state,
  load, addresses), the cluster-wide worker leases and this broker's view of them.
- ``GET /admin/v2/nereus/owned-topics`` (Nereus): the topics this broker owns.
"""

from __future__ import annotations

import importlib.metadata
import json
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from ...topics import BrokerAddress
from ..cluster import ACTIVE
from ..cluster.lease import LEASES
from .common import AdminContext, AdminError, context, no_content

#: A drain waits for every topic to be handed over; a forwarded one may take as long.
FORWARD_TIMEOUT = 300.0


def broker_id(address: BrokerAddress) -> str:
    """Pulsar's broker id: ``host:httpPort`` of its web service."""
    return urlsplit(address.http_url).netloc


def _node(ctx: AdminContext):
    if ctx.node is None:
        raise AdminError(501, "This broker runs without cluster membership")
    return ctx.node


def _require_cluster(ctx: AdminContext, cluster: str) -> None:
    if cluster != ctx.cluster_name:
        raise AdminError(404, f"Cluster {cluster} does not exist")


def _records(ctx: AdminContext) -> list:
    """The live brokers' registrations, in node id order."""
    return sorted(_node(ctx).membership.brokers.values(), key=lambda r: r.address.node_id)


async def _leases(ctx: AdminContext) -> dict[str, str | None]:
    """Every cluster-wide worker lease as stored: worker -> holder."""
    leases = {}
    async for rec in ctx.meta.range_scan(LEASES, LEASES + "\uffff"):
        try:
            leases[rec.key[len(LEASES):]] = json.loads(rec.value)["holder"]
        except (ValueError, KeyError, TypeError):
            continue
    return leases


# -- Pulsar's resources ------------------------------------------------------------------------
async def list_clusters(request: web.Request) -> web.Response:
    return web.json_response([context(request).cluster_name])


async def get_cluster(request: web.Request) -> web.Response:
    ctx = context(request)
    _require_cluster(ctx, request.match_info["cluster"])
    local = ctx.placement.local
    return web.json_response({"serviceUrl": local.http_url, "serviceUrlTls": local.https_url,
                              "brokerServiceUrl": ctx.pulsar.service_url,
                              "brokerServiceUrlTls": ctx.pulsar.service_url_tls,
                              "peerClusterNames": []})


async def list_brokers(request: web.Request) -> web.Response:
    ctx = context(request)
    _require_cluster(ctx, request.match_info["cluster"])
    return web.json_response(sorted(broker_id(r.address) for r in _records(ctx)))


async def failure_domains(request: web.Request) -> web.Response:
    ctx = context(request)
    _require_cluster(ctx, request.match_info["cluster"])
    domains: dict[str, dict[str, list[str]]] = {}
    for record in _records(ctx):
        domains.setdefault(record.address.zone, {"brokers": []})["brokers"].append(broker_id(record.address))
    wanted = request.match_info.get("domain")
    if wanted is None:
        return web.json_response(domains)
    if wanted not in domains:
        raise AdminError(404, f"Domain {wanted} for cluster {ctx.cluster_name} does not exist")
    return web.json_response(domains[wanted])


async def owned_namespaces(request: web.Request) -> web.Response:
    ctx = context(request)
    _require_cluster(ctx, request.match_info["cluster"])
    wanted = request.match_info["broker"]
    target = next((r.address for r in _records(ctx) if wanted in (r.address.name, broker_id(r.address))), None)
    if target is None:
        raise AdminError(404, f"Broker {wanted} is not live in the cluster")
    if target.name != ctx.placement.local.name:
        raise web.HTTPTemporaryRedirect(target.http_url + request.path_qs)
    namespaces = sorted({topic.split("://", 1)[-1].rsplit("/", 1)[0] for topic in getattr(ctx.placement, "owned", ())})
    status = {"broker_assignment": "primary", "is_controlled": False, "is_active": True}
    return web.json_response({f"{ns}/0x00000000_0xffffffff": status for ns in namespaces})


async def version(request: web.Request) -> web.Response:
    context(request)
    try:
        text = importlib.metadata.version("nereus")
    except importlib.metadata.PackageNotFoundError:
        text = "unknown"
    return web.Response(text=text)


async def ready(request: web.Request) -> web.Response:
    context(request)  # answers once the admin API is attached, i.e. the listeners serve
    return web.Response(text="ok")


async def leader_broker(request: web.Request) -> web.Response:
    ctx = context(request)
    holder = (await _leases(ctx)).get("gc")
    record = _node(ctx).membership.brokers.get(holder) if holder else None
    if record is None:
        raise AdminError(503, "No broker holds the cluster lease yet")
    return web.json_response({"serviceUrl": record.address.http_url, "brokerId": broker_id(record.address)})


# -- drain -----------------------------------------------------------------------------------------
async def drain(request: web.Request) -> web.Response:
    await _node(context(request)).drain()
    return no_content()


async def undrain(request: web.Request) -> web.Response:
    await _node(context(request)).membership.set_state(ACTIVE)
    return no_content()


async def drain_broker(request: web.Request) -> web.Response:
    """Drain or undrain the broker named in the path (its name or its Pulsar broker id)."""
    ctx = context(request)
    _require_cluster(ctx, request.match_info["cluster"])
    wanted, action = request.match_info["broker"], request.match_info["action"]
    target = next((r.address for r in _records(ctx) if wanted in (r.address.name, broker_id(r.address))), None)
    if target is None:
        raise AdminError(404, f"Broker {wanted} is not live in the cluster")
    if target.name == ctx.placement.local.name:
        return await (drain if action == "drain" else undrain)(request)
    # Forwarded rather than redirected: a redirected POST is not followed by every client.
    url = f"{target.http_url}/admin/v2/brokers/{action}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=FORWARD_TIMEOUT)) as session:
            async with session.post(url) as response:
                body = await response.read()
                return web.Response(status=response.status, body=body or None,
                                    content_type=response.content_type if body else None)
    except aiohttp.ClientError as exc:
        raise AdminError(502, f"Broker {target.name} did not answer: {exc}") from None


# -- Nereus' view --------------------------------------------------------------------------------
async def cluster_view(request: web.Request) -> web.Response:
    ctx = context(request)
    node = _node(ctx)
    brokers = [{"name": r.address.name, "brokerId": broker_id(r.address), "nodeId": r.address.node_id,
                "zone": r.address.zone, "state": r.state, "load": r.load, "pulsarUrl": r.address.pulsar_url,
                "httpUrl": r.address.http_url, "kafkaAddress": r.address.kafka_address,
                "incarnation": r.incarnation} for r in _records(ctx)]
    return web.json_response({"cluster": ctx.cluster_name, "broker": node.membership.name,
                              "state": node.membership.state, "brokers": brokers,
                              "leases": await _leases(ctx), "localLeases": dict(node.leases)})


async def owned_topics(request: web.Request) -> web.Response:
    ctx = context(request)
    return web.json_response(sorted(getattr(ctx.placement, "owned", ())))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/clusters", list_clusters)
    router.add_get("/admin/v2/clusters/{cluster}", get_cluster)
    router.add_get("/admin/v2/clusters/{cluster}/failureDomains", failure_domains)
    router.add_get("/admin/v2/clusters/{cluster}/failureDomains/{domain}", failure_domains)
    # Before ``/brokers/{cluster}``: routes match in the order they were added.
    router.add_get("/admin/v2/brokers/leaderBroker", leader_broker)
    router.add_get("/admin/v2/brokers/version", version)
    router.add_get("/admin/v2/brokers/ready", ready)
    router.add_post("/admin/v2/brokers/drain", drain)
    router.add_post("/admin/v2/brokers/undrain", undrain)
    router.add_get("/admin/v2/brokers/{cluster}", list_brokers)
    router.add_get("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", owned_namespaces)
    router.add_post("/admin/v2/brokers/{cluster}/{broker}/{action:drain|undrain}", drain_broker)
    router.add_get("/admin/v2/nereus/cluster", cluster_view)
    router.add_get("/admin/v2/nereus/owned-topics", owned_topics)


__all__ = ["add_routes", "broker_id"]
