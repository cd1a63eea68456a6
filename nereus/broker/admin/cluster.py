"""The cluster over REST: Pulsar's ``/admin/v2/clusters`` and ``/admin/v2/brokers``, drain, and Nereus' view.

- ``GET /admin/v2/clusters``: this broker's cluster (``--cluster-name``) and every cluster with a record
  (``nereus.ledger.clusters``: how a replicator reaches it).
- ``GET /admin/v2/clusters/{cluster}``: its ClusterData: the local cluster's is this broker's service URLs
  overlaid with its record's fields, if it has one; another's is its record; unknown: 404.
- ``PUT /admin/v2/clusters/{cluster}``: record a cluster from a ClusterData body (409 if it is known);
  ``POST``: replace its record (404 if unknown; the local cluster's is created); ``DELETE``: forget it
  (404 if it has no record; 412 while a tenant allows it or a namespace replicates to it, and for the
  local cluster). URLs are checked as Pulsar checks them (``serviceUrl`` http://, ``serviceUrlTls``
  https://, ``brokerServiceUrl`` pulsar://, ``brokerServiceUrlTls`` pulsar+ssl://; several hosts
  separated by commas), flags must be booleans: else 400.
- ``GET`` | ``POST /admin/v2/clusters/{cluster}/peers``: its ``peerClusterNames`` | set them (each a known
  cluster other than itself, else 412).
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

from ...ledger.clusters import (FIELDS, NAMESPACE_REPLICATION_FIELD, ClusterData, cluster_key, delete_cluster,
                                get_cluster as read_cluster, put_cluster)
from ...ledger.policies import POLICIES_ROOT, TENANTS_ROOT, tenant_key
from ...meta import EXPECT_ABSENT, UnexpectedVersion, cas
from ...topics import BrokerAddress
from ..cluster import ACTIVE
from ..cluster.lease import LEASES
from .common import (UPDATE_ATTEMPTS, AdminContext, AdminError, body, check_name, children_range, context,
                     known_clusters, list_children, no_content, update_record)

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


# -- ClusterData ---------------------------------------------------------------------------------
#: URL field -> (the scheme Pulsar requires of it, Pulsar's words when it is wrong)
URL_FIELDS = {
    "serviceUrl": ("http", "Illegal service url, example: http://pulsar.example.com:8080"),
    "serviceUrlTls": ("https", "Illegal service tls url, example: https://pulsar.example.com:8443"),
    "brokerServiceUrl": ("pulsar", "Illegal broker service url, example: pulsar://pulsar.example.com:6650"),
    "brokerServiceUrlTls": ("pulsar+ssl",
                            "Illegal broker service tls url, example: pulsar+ssl://pulsar.example.com:6651"),
}
FLAG_FIELDS = ("brokerClientTlsEnabled", "tlsAllowInsecureConnection")
PEERS_FIELD = "peerClusterNames"


def _url_ok(text: str, scheme: str) -> bool:
    """``scheme://host[:port][,host[:port]...][/path]`` (Pulsar's service URLs may list several hosts)."""
    try:
        parts = urlsplit(text)
        if parts.scheme != scheme or not parts.netloc:
            return False
        for host in parts.netloc.split(","):
            address = urlsplit(f"//{host}")
            if not address.hostname:
                return False
            address.port  # raises ValueError for a port that is not a number in range
    except ValueError:
        return False
    return True


def _peer_names(value) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
        raise AdminError(400, f"{PEERS_FIELD} must be a list of cluster names")
    return sorted(set(value))


def cluster_fields(value) -> dict:
    """The record kept of a ClusterData body, checked (400 naming the wrong field).

    As Pulsar reads it: fields it does not keep are ignored and a null field is unset.
    """
    if value is None:
        raise AdminError(400, "cluster data is required")
    if not isinstance(value, dict):
        raise AdminError(400, "The cluster data must be a JSON object")
    fields = {}
    for name in FIELDS:
        given = value.get(name)
        if given is None:
            continue
        if name in URL_FIELDS:
            scheme, words = URL_FIELDS[name]
            if not isinstance(given, str) or not _url_ok(given, scheme):
                raise AdminError(400, f"{words} (given {name}: {given!r})")
        elif name in FLAG_FIELDS:
            if not isinstance(given, bool):
                raise AdminError(400, f"{name} must be true or false")
        elif name == PEERS_FIELD:
            given = _peer_names(given)
        elif not isinstance(given, str):
            raise AdminError(400, f"{name} must be a string")
        fields[name] = given
    return fields


def _local_data(ctx: AdminContext) -> dict:
    """This broker's own ClusterData: the URLs it serves."""
    local = ctx.placement.local
    return {"serviceUrl": local.http_url, "serviceUrlTls": local.https_url,
            "brokerServiceUrl": ctx.pulsar.service_url, "brokerServiceUrlTls": ctx.pulsar.service_url_tls,
            PEERS_FIELD: []}


async def _change_local_record(ctx: AdminContext, change) -> None:
    """Read-modify-write the local cluster's record (created if absent: the local cluster always exists)."""
    def apply(old: bytes | None) -> bytes:
        stored = ClusterData.decode(ctx.cluster_name, old).fields if old is not None else {}
        return ClusterData(ctx.cluster_name, change(stored)).encode()

    try:
        await cas.update(ctx.meta, cluster_key(ctx.cluster_name), apply, max_attempts=UPDATE_ATTEMPTS)
    except UnexpectedVersion:
        raise AdminError(409, "Cluster was modified concurrently; try again") from None


async def _change_record(ctx: AdminContext, name: str, change) -> None:
    """Read-modify-write cluster ``name``'s record by compare-and-set; 404 for an unknown cluster."""
    if name == ctx.cluster_name:
        await _change_local_record(ctx, change)
    else:
        await update_record(ctx.meta, cluster_key(name), change, what="Cluster")


async def _users(ctx: AdminContext, cluster: str) -> str | None:
    """What still names ``cluster``: a tenant allowing it or a namespace replicating to it; None if nothing."""
    for tenant in sorted(await list_children(ctx.meta, TENANTS_ROOT)):
        rec = await ctx.meta.get(tenant_key(tenant))
        if rec is not None and cluster in (json.loads(rec.value).get("allowedClusters") or ()):
            return f"tenant {tenant} allows it"
        async for ns in ctx.meta.range_scan(*children_range(f"{POLICIES_ROOT}/{tenant}")):
            if cluster in (json.loads(ns.value).get(NAMESPACE_REPLICATION_FIELD) or ()):
                return f"namespace {tenant}/{ns.key.rsplit('/', 1)[1]} replicates to it"
    return None


# -- Pulsar's resources ------------------------------------------------------------------------
async def list_clusters(request: web.Request) -> web.Response:
    ctx = context(request)
    return web.json_response(sorted(await known_clusters(ctx)))


async def get_cluster(request: web.Request) -> web.Response:
    ctx = context(request)
    name = request.match_info["cluster"]
    record = await read_cluster(ctx.meta, name)
    if name == ctx.cluster_name:
        return web.json_response({**_local_data(ctx), **(record.fields if record is not None else {})})
    if record is None:
        raise AdminError(404, "Cluster does not exist")
    return web.json_response(record.fields)


async def create_cluster(request: web.Request) -> web.Response:
    ctx = context(request)
    name = check_name(request.match_info["cluster"], "Cluster")
    fields = cluster_fields(await body(request))
    if name == ctx.cluster_name:
        raise AdminError(409, "Cluster already exists")
    try:
        await put_cluster(ctx.meta, ClusterData(name, fields), expected_version_id=EXPECT_ABSENT)
    except UnexpectedVersion:
        raise AdminError(409, "Cluster already exists") from None
    return no_content()


async def update_cluster(request: web.Request) -> web.Response:
    """Replace a cluster's record with the body, as Pulsar's update does (a concurrent delete wins: 404)."""
    ctx = context(request)
    name = request.match_info["cluster"]
    fields = cluster_fields(await body(request))
    await _change_record(ctx, name, lambda _stored: fields)
    return no_content()


async def delete_cluster_record(request: web.Request) -> web.Response:
    ctx = context(request)
    name = request.match_info["cluster"]
    if name == ctx.cluster_name:
        raise AdminError(412, "The local cluster cannot be deleted")
    if await read_cluster(ctx.meta, name) is None:
        raise AdminError(404, "Cluster does not exist")
    user = await _users(ctx, name)
    if user is not None:
        raise AdminError(412, f"Cluster not empty: {user}")
    if not await delete_cluster(ctx.meta, name):
        raise AdminError(404, "Cluster does not exist")
    return no_content()


async def get_peers(request: web.Request) -> web.Response:
    ctx = context(request)
    name = request.match_info["cluster"]
    record = await read_cluster(ctx.meta, name)
    if record is None and name != ctx.cluster_name:
        raise AdminError(404, "Cluster does not exist")
    return web.json_response(record.fields.get(PEERS_FIELD, []) if record is not None else [])


async def set_peers(request: web.Request) -> web.Response:
    ctx = context(request)
    name = request.match_info["cluster"]
    peers = _peer_names(await body(request, []))
    known = await known_clusters(ctx)
    if name not in known:
        raise AdminError(404, "Cluster does not exist")
    for peer in peers:  # Pulsar's checks and words
        if peer == name:
            raise AdminError(412, f"{name} itself can't be part of peer-list")
        if peer not in known:
            raise AdminError(412, f"Peer cluster {peer} does not exist")
    await _change_record(ctx, name, lambda stored: {**stored, PEERS_FIELD: peers})
    return no_content()


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
    router.add_put("/admin/v2/clusters/{cluster}", create_cluster)
    router.add_post("/admin/v2/clusters/{cluster}", update_cluster)
    router.add_delete("/admin/v2/clusters/{cluster}", delete_cluster_record)
    router.add_get("/admin/v2/clusters/{cluster}/peers", get_peers)
    router.add_post("/admin/v2/clusters/{cluster}/peers", set_peers)
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


__all__ = ["add_routes", "broker_id", "cluster_fields"]
