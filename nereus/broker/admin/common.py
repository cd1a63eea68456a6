"""Shared pieces of the admin API: context, errors as Pulsar's ``{"reason": ...}``, names, lookups."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field

from aiohttp import web

from ...ledger.clusters import list_clusters
from ...ledger.naming import InvalidTopicName, TopicName
from ...meta import InvalidRequest, MetadataStore, UnexpectedVersion, cas
from ...ledger.policies import POLICIES_ROOT, TENANTS_ROOT, policies_key, tenant_key
from ...pulsar.server.topics import partitions_of
from ...storage import StreamNotFound, StreamStorage
from ...topics import NotOwner
from ...topics.partitioned import MAX_PARTITIONS, ensure_stream, is_declared_partition

log = logging.getLogger(__name__)

DEFAULT_CLUSTER = "standalone"
_NAME = re.compile(r"^[A-Za-z0-9_=:.\-]+$")
_TOP = "\U0010ffff"
#: Read-modify-write attempts of an admin update; one that loses this many races answers 409.
UPDATE_ATTEMPTS = 5


class AdminError(Exception):
    """Answered as ``{"reason": reason}`` with ``status``."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass
class AdminContext:
    """What the admin handlers work with; ``pulsar`` is set once the broker runs."""

    storage: StreamStorage | None = None
    meta: MetadataStore | None = None
    pulsar: object | None = None
    node: object | None = None  # the BrokerNode: membership, placement, drain, leases
    tasks: list = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.pulsar is not None

    @property
    def placement(self):
        return self.pulsar.registry.placement

    @property
    def sbt_catalog(self):
        """Where the topics' built-in tables are (``iceberg_rest.sbt_catalog.CatalogLocation``); None: nowhere."""
        return self.node.sbt_catalog if self.node is not None else None

    @property
    def cluster_name(self) -> str:
        return self.node.options.cluster_name if self.node is not None else DEFAULT_CLUSTER

    @property
    def max_partitions(self) -> int:
        """Most partitions a partitioned topic may have here (maxNumPartitionsPerPartitionedTopic)."""
        return self.node.options.partition_limit if self.node is not None else MAX_PARTITIONS


CONTEXT = web.AppKey("nereus_admin", AdminContext)


def context(request: web.Request) -> AdminContext:
    ctx = request.app[CONTEXT]
    if not ctx.ready:
        raise AdminError(503, "The broker is not ready")
    return ctx


@web.middleware
async def errors(request: web.Request, handler):
    """Every failure of an admin path becomes Pulsar's JSON error body."""
    try:
        return await handler(request)
    except AdminError as exc:
        return web.json_response({"reason": exc.reason}, status=exc.status)
    except NotOwner as exc:
        # Another broker took the topic while this request ran: send the client there.
        if exc.owner is not None:
            raise web.HTTPTemporaryRedirect(exc.owner.http_url + str(request.rel_url)) from None
        return web.json_response({"reason": str(exc)}, status=503)
    except InvalidTopicName as exc:
        # A name in the path that no topic can have (Pulsar answers 412 too).
        return web.json_response({"reason": str(exc)}, status=412)
    except InvalidRequest as exc:
        # A name the metadata store refuses as a key (e.g. one holding NUL).
        return web.json_response({"reason": f"invalid name: {exc}"}, status=412)
    except web.HTTPException as exc:
        if not request.path.startswith("/admin/") or exc.status < 400:
            raise
        return web.json_response({"reason": exc.reason}, status=exc.status)
    except Exception as exc:
        log.exception("admin %s %s failed", request.method, request.path)
        return web.json_response({"reason": f"{type(exc).__name__}: {exc}"}, status=500)


async def update_record(meta: MetadataStore, key: str, change, *, what: str) -> None:
    """Read-modify-write the JSON record at ``key`` by compare-and-set on the version read.

    ``change(stored)`` returns the new dict. A write that lost to another writer (another
    broker on the same metadata) is redone on a fresh read, so no concurrent change is
    overwritten; after ``UPDATE_ATTEMPTS`` lost races the answer is 409 Conflict. A record
    that is absent (or was deleted meanwhile) answers 404 rather than being recreated.
    """
    def apply(old: bytes | None) -> bytes:
        if old is None:
            raise AdminError(404, f"{what} does not exist")
        return json.dumps(change(json.loads(old))).encode()

    try:
        await cas.update(meta, key, apply, max_attempts=UPDATE_ATTEMPTS)
    except UnexpectedVersion:
        raise AdminError(409, f"{what} was modified concurrently; try again") from None


def no_content() -> web.Response:
    return web.Response(status=204)


async def body(request: web.Request, default=None):
    """The JSON body, ``default`` when there is none; 400 when it is not JSON."""
    raw = await request.read()
    if not raw.strip():
        return default
    try:
        return json.loads(raw)
    except ValueError:
        raise AdminError(400, "The request body is not valid JSON") from None


def flag(request: web.Request, name: str, *, default: bool = False) -> bool:
    return request.query.get(name, "true" if default else "false").lower() == "true"


def check_name(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise AdminError(412, f"{what} name is not valid")
    return name


def topic_name(request: web.Request) -> TopicName:
    m = request.match_info
    try:
        return TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
    except InvalidTopicName:
        raise AdminError(412, "Topic name is not valid") from None


def children_range(prefix: str) -> tuple[str, str]:
    """Keys directly below ``prefix`` (hierarchical key order: deeper keys sort after)."""
    return f"{prefix}/", f"{prefix}/{_TOP}"


async def list_children(meta: MetadataStore, prefix: str) -> list[str]:
    lo, hi = children_range(prefix)
    return [k[len(lo):] async for k in meta.list(lo, hi)]


async def require_tenant(meta: MetadataStore, tenant: str) -> dict:
    rec = await meta.get(tenant_key(tenant))
    if rec is None:
        raise AdminError(404, "Tenant does not exist")
    return json.loads(rec.value)


async def known_clusters(ctx: AdminContext) -> set[str]:
    """The clusters this broker knows: its own and every one with a record."""
    return {ctx.cluster_name, *await list_clusters(ctx.meta)}


async def namespace_policies(meta: MetadataStore, tenant: str, namespace: str) -> dict | None:
    rec = await meta.get(policies_key(tenant, namespace))
    return json.loads(rec.value) if rec is not None else None


async def require_namespace(meta: MetadataStore, tenant: str, namespace: str) -> dict:
    policies = await namespace_policies(meta, tenant, namespace)
    if policies is None:
        await require_tenant(meta, tenant)
        raise AdminError(404, "Namespace does not exist")
    return policies


async def namespaces_of(meta: MetadataStore, tenant: str) -> list[str]:
    return sorted(f"{tenant}/{ns}" for ns in await list_children(meta, f"{POLICIES_ROOT}/{tenant}"))


async def stream_exists(storage: StreamStorage, name: TopicName) -> bool:
    try:
        await storage.stream_id(str(name))
    except StreamNotFound:
        return False
    return True


async def require_topic(ctx: AdminContext, name: TopicName):
    """The loaded (non-partitioned or partition) topic; 404 when it does not exist."""
    key = str(name)
    topic = ctx.pulsar.topics.get(key)
    if topic is not None:
        return topic
    if not await stream_exists(ctx.storage, name):
        if not await is_declared_partition(ctx.meta, name):
            raise AdminError(404, "Topic not found")
        # A partition of a partitioned topic declared before its partitions were created with it.
        await ensure_stream(ctx.storage, key)
    return await ctx.pulsar.get_topic(name)


async def partitions(ctx: AdminContext, name: TopicName) -> list[TopicName]:
    """The partitions of a partitioned topic, else ``[name]``."""
    count = await partitions_of(ctx.meta, name)
    return [name.partition(i) for i in range(count)] if count else [name]


__all__ = ["AdminContext", "AdminError", "CONTEXT", "TENANTS_ROOT", "body", "check_name", "context", "errors",
           "flag", "known_clusters", "list_children", "namespace_policies", "namespaces_of", "no_content", "partitions",
           "require_namespace", "require_tenant", "require_topic", "stream_exists", "tenant_key", "topic_name"]
