"""Which replicators run on this broker: one per loaded topic and remote cluster of its policy.

A topic's replication clusters are its topic policy's ``replicationClusters``, else its
namespace's ``replication_clusters``; every cluster named there but the local one gets
a replicator, on the broker that owns the topic. They are read when the topic loads and
again on every policy change (``TopicRegistry.on_policies``). A replicator with a backlog keeps
its topic loaded; an unload (the topic moved, the broker stops) stops it, and the next
owner resumes from the cursor and the remote's last sequence id.
"""

from __future__ import annotations

import asyncio
import logging
import ssl

import aiohttp

from ...ledger.clusters import ClusterData, get_cluster
from ...tasks import spawn
from ...topics.partitioned import partitions_of
from ...topics.placement import NotOwner
from ..client import ClientError, ClusterClient
from ..server.producers import REPLICATION
from .replicator import ReplicationError, Replicator
from .subscriptions import ReplicatedSubscriptions

log = logging.getLogger(__name__)

ATTACHMENT = REPLICATION  # the topic attachment the Pulsar server hands markers to


def _ssl_context(cluster: ClusterData, url: str) -> ssl.SSLContext | None:
    """The TLS context for ``url`` (a Pulsar or an admin URL of ``cluster``), None without TLS."""
    fields = cluster.fields
    if not url.startswith(("pulsar+ssl://", "https://")):
        return None
    context = ssl.create_default_context(cafile=fields.get("brokerClientTrustCertsFilePath") or None)
    context.check_hostname = False  # brokers register by address, as Pulsar's broker clients assume
    if fields.get("tlsAllowInsecureConnection"):
        context.verify_mode = ssl.CERT_NONE
    return context


class ReplicationManager:
    """The replicators of this broker's loaded topics, and one client per remote cluster."""

    def __init__(self, registry, meta, objects, local_cluster: str, service=None) -> None:
        self.registry = registry
        self.meta = meta
        self.objects = objects
        self.local_cluster = local_cluster
        self.service = service  # the Pulsar service: its transaction views, once enabled
        self._clients: dict[str, tuple[bytes, ClusterClient]] = {}
        registry.on_load(self._policies_read)
        registry.on_policies(self._policies_read)

    @property
    def stream_txns(self):
        return getattr(self.service, "stream_txns", None)

    def _policies_read(self, topic) -> None:
        # Most topics are not replicated: their state is made only once their policies name another
        # cluster (or a marker from one arrives), so an idle loaded topic costs nothing here.
        if topic.end_at_load < 0:
            return  # still loading: its load (on_load) reads them once it is
        state = topic.attachments.get(ATTACHMENT)
        if state is None:
            if not any(cluster != self.local_cluster for cluster in topic.replication_clusters):
                return
            state = self.attach(topic)
        state.sync_soon()

    def attach(self, topic) -> "TopicReplication":
        """The replication state of loaded ``topic``, made now if it has none yet."""
        state = topic.attachments.get(ATTACHMENT)
        if state is None:
            # A new replicator starts where the stream ended at load (Pulsar's latest).
            state = TopicReplication(self, topic, max(topic.end_at_load, 0))
            topic.attachments[ATTACHMENT] = state
            topic.on_append(state.wake)
            topic.on_unload(state.stop)
            topic.busy_while(state.busy)
        return state

    async def client(self, remote: str) -> ClusterClient:
        """The client of cluster ``remote`` as its record says now (a changed record: a new client)."""
        cluster = await get_cluster(self.meta, remote)
        if cluster is None or not cluster.broker_service_url:
            raise ReplicationError(f"cluster {remote} is not known here (no brokerServiceUrl): "
                                   f"PUT /admin/v2/clusters/{remote}")
        fingerprint = cluster.encode()
        cached = self._clients.get(remote)
        if cached is not None and cached[0] == fingerprint:
            return cached[1]
        if cached is not None:
            cached[1].close()
        client = ClusterClient(cluster.broker_service_url, token=cluster.auth_token(), ssl_context=_ssl_context(cluster, cluster.broker_service_url))
        client.cluster = cluster
        self._clients[remote] = (fingerprint, client)
        return client

    def topics(self):
        """(topic, TopicReplication) of every loaded topic with a replicator."""
        for topic in list(self.registry.topics.values()):
            state = topic.attachments.get(ATTACHMENT)
            if state is not None and state.replicators:
                yield topic, state

    async def close(self) -> None:
        for topic, state in list(self.topics()):
            await state.stop("broker stopping")
        for _, client in self._clients.values():
            client.close()
        self._clients.clear()


class TopicReplication:
    """The replicators of one loaded topic, by remote cluster name."""

    def __init__(self, manager: ReplicationManager, topic, initial: int) -> None:
        self.manager = manager
        self.topic = topic
        self.initial = initial  # where a new replicator starts: the end at load (Pulsar's latest)
        self.replicators: dict[str, Replicator] = {}
        self._remote_topic_checked: set[str] = set()
        self._sync: asyncio.Task | None = None
        self._again = False
        self._stopped = False
        self.subscriptions = ReplicatedSubscriptions(self)

    def busy(self) -> bool:
        return any(r.backlog() > 0 for r in self.replicators.values())

    def wake(self) -> None:
        for replicator in self.replicators.values():
            replicator.wake()

    def sync_soon(self) -> None:
        if self._sync is not None and not self._sync.done():
            self._again = True
            return
        self._sync = spawn(self._sync_loop(), f"{self.topic.name}: replication clusters")

    async def _sync_loop(self) -> None:
        self._again = True
        while self._again and not self._stopped:
            self._again = False
            try:
                await self._sync_once()
            except Exception as exc:  # the next policy change or load tries again
                log.warning("%s: replication not started: %s", self.topic.name, exc)

    async def _sync_once(self) -> None:
        local = self.manager.local_cluster
        wanted = {c for c in self.topic.replication_clusters if c != local}  # as its policies were last read
        for remote in set(self.replicators) - wanted:
            log.info("%s: replication to %s stopped (policy): its cursor is dropped", self.topic.name, remote)
            await self.replicators.pop(remote).stop(forget=True)
        missing = wanted - set(self.replicators)
        if not missing or self._stopped:
            return
        try:  # replicators run where the topic's writes are served
            await self.topic.registry.claim(self.topic.name)
        except NotOwner:
            return
        initial = self.initial if not self.replicators else self.topic.handle.next_offset()
        for remote in sorted(missing):
            if self._stopped or self.topic.closed:
                return
            log.info("%s: replicating to %s", self.topic.name, remote)
            self.replicators[remote] = Replicator(self, remote, initial)
        self.subscriptions.start()

    async def ensure_remote_topic(self, client: ClusterClient) -> None:
        """Create the partitioned topic on the remote cluster when a partition of it is replicated."""
        name = self.topic.name
        if name.partition_index < 0 or client.service_url in self._remote_topic_checked:
            return
        base = name.base
        if await client.partitions(str(base)) == 0:
            count = await partitions_of(self.manager.meta, base)
            if count > 0:
                await _create_partitioned(client, base, count)
        self._remote_topic_checked.add(client.service_url)

    async def stop(self, reason: str = "") -> None:
        self._stopped = True
        if self._sync is not None:
            self._sync.cancel()
        replicators, self.replicators = list(self.replicators.values()), {}
        await asyncio.gather(self.subscriptions.stop(), *(r.stop() for r in replicators), return_exceptions=True)

    def marker_stored(self, marker_type: int, payload: bytes, offset: int) -> None:
        """A replicated-subscription marker from another cluster was stored at ``offset``."""
        if not self._stopped:
            spawn(self.subscriptions.marker_stored(marker_type, payload, offset),
                  f"{self.topic.name}: replicated subscription marker")

    def stats(self) -> dict:
        return {remote: r.stats() for remote, r in sorted(self.replicators.items())}


async def _create_partitioned(client: ClusterClient, base, count: int) -> None:
    cluster = client.cluster
    url = cluster.service_url
    if not url:
        raise ReplicationError(f"cluster {cluster.name} has no serviceUrl to create {base} with {count} partitions")
    headers = {"Content-Type": "application/json"}
    token = cluster.auth_token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    path = f"/admin/v2/persistent/{base.tenant}/{base.namespace}/{base.local}/partitions"
    ssl_context = _ssl_context(cluster, url)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        async with session.put(url.rstrip("/") + path, data=str(count), headers=headers,
                               ssl=ssl_context if ssl_context is not None else None) as response:
            if response.status not in (200, 204, 409):  # 409: made meanwhile (another partition's replicator)
                raise ClientError(f"creating {base} on {cluster.name}: HTTP {response.status} "
                                  f"{(await response.text())[:200]}")
    log.info("created %s with %d partitions on cluster %s", base, count, cluster.name)


__all__ = ["ATTACHMENT", "ReplicationManager", "TopicReplication"]
