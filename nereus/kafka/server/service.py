"""The Kafka listener of one broker.

``KafkaService(storage, meta, registry, host=..., port=...)``; ``await start()``
binds the port, ``await stop()`` closes connections and flushes group state.
Partitions share the Pulsar service's loaded topics, so one stream has one
append session in this process whichever protocol writes to it. Where the
cluster is (other brokers, leaders, coordinators, nearest replicas) comes from
the registry's placement (``catalog/routing.py``); alone, this broker is node 0 and
leads every partition.

The handlers are arranged in rooms by concern (``wire``, ``catalog``, ``data``,
``txn``, ``groups``, ``share``, ``security``, ``admin``); the service builds each
room's context once, with the collaborators that room uses, and binds the handlers
to them (``wire/dispatch.py``). Only the connections (``wire``) see the service.
"""

from __future__ import annotations

import asyncio
from functools import partial
import logging
import uuid

from ...meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ...net_limits import ConnectionLimits
from ...storage import StreamStorage
from ...topics.partitioned import MAX_PARTITIONS
from ...transactions.producer_ids import ProducerIds
from .admin.context import AdminContext, TopicLimits
from .catalog.catalog import Catalog
from .catalog.configs import TopicConfigs
from .catalog.producer_state import EXPIRATION_SECONDS, MAX_PRODUCERS
from .catalog.routing import LocalBroker, Routing
from .data.context import DataContext
from .groups import lag, txn_offsets
from .groups.context import GroupContext
from .groups.coordinator import Coordinator
from .security.context import SecurityContext
from .security.quota_store import QuotaStore
from .security.quotas import ConnectionRates, Throttles
from .security.sasl import SaslSettings
from .security.scram_store import ScramStore
from .share.context import ShareContext
from .share.groups import ShareGroups
from .txn import data_path as txn_data, markers as txn_markers
from .txn.context import Transactions, TxnContext
from .wire import dispatch

log = logging.getLogger(__name__)

CLUSTER_ID_KEY = "/nereus/kafka/cluster-id"


class KafkaService:
    """One Kafka protocol endpoint over a StreamStorage and the broker's topic registry."""

    def __init__(self, storage: StreamStorage, meta: MetadataStore, registry, *, host: str = "127.0.0.1",
                 port: int = 9092, advertised_host: str | None = None, node_id: int = 0,
                 max_request_size: int = 100 << 20, max_message_bytes: int | None = None,
                 auto_create: bool = True, default_partitions: int = 1, max_partitions: int = MAX_PARTITIONS,
                 max_replication_factor: int = 32,
                 producer_expiration_seconds: float = EXPIRATION_SECONDS,
                 max_producers_per_partition: int = MAX_PRODUCERS, sasl: SaslSettings | None = None,
                 limits: ConnectionLimits | None = None, authorizer=None, anonymous_role: str | None = None,
                 consumer_heartbeat_interval: float = 2.0, consumer_session_timeout: float = 45.0,
                 max_connection_creation_rate: float = 0, broker_configs: dict[str, str] | None = None) -> None:
        self.storage = storage
        self.authorizer = authorizer  # nereus.auth.authorization.Authorizer; None: authorization disabled
        self.anonymous_role = anonymous_role  # the principal of clients on listeners without SASL
        self.meta = meta
        self.registry = registry
        self.host = host
        self.port = port
        self.max_request_size = max_request_size
        self.limits = limits or ConnectionLimits(protocol="kafka")  # connections per IP, slow frames
        self.sasl = sasl  # the SASL_PLAINTEXT / SASL_SSL listeners' mechanisms and token check
        self.scram = ScramStore(meta)
        self.quotas = QuotaStore(meta)  # client quotas, enforced through self.throttles
        self.throttles = Throttles(self.quotas)
        # the ip entities' connection_creation_rate, and the broker's max.connection.creation.rate
        self.connection_rates = ConnectionRates(self.quotas, broker_rate=max_connection_creation_rate)
        self.connections: set = set()
        # Port of each listener by security protocol (PLAINTEXT: ``port``): what Metadata tells its clients.
        self.local = LocalBroker(node_id, advertised_host
                                 or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1"))
        self.listener_ports = self.local.listener_ports
        self.routing = Routing(registry, self.local)
        # message.max.bytes: the broker's own default (8 MiB, Pulsar's) unless its options set one
        self.configs = TopicConfigs(meta, self.local, max_message_bytes=max_message_bytes,
                                    default_partitions=default_partitions, auto_create=auto_create,
                                    static=broker_configs)
        # Idempotent producer state per partition: forgotten after this long idle, and capped in count.
        self.catalog = Catalog(meta, storage, registry, self.configs, producer_options={
            "expiration_seconds": producer_expiration_seconds, "max_producers": max_producers_per_partition})
        self.share_groups = ShareGroups(meta, storage, self.configs)
        self.coordinator = Coordinator(meta, serves=self.routing.is_coordinator,
                                       consumer_session_timeout=consumer_session_timeout)
        self.producer_ids = ProducerIds(meta)
        # The broker's transactions, once it enables them (enable_transactions)
        self.txns = Transactions()
        self.handlers = self._handlers(TopicLimits(auto_create, default_partitions, max_partitions,
                                                   max_replication_factor), consumer_heartbeat_interval)
        self._server: asyncio.base_events.Server | None = None
        self._listener_servers: list[asyncio.base_events.Server] = []
        self._lag_metrics = None

    def _handlers(self, limits: TopicLimits, heartbeat_interval: float) -> dict:
        """Each room's context, and the handlers bound to them."""
        share = ShareContext(self.share_groups, self.catalog, self.routing, self.storage, self.meta,
                             self.coordinator.coordinates, partial(txn_data.view, self.txns))
        return dispatch.handlers(
            admin=AdminContext(self.catalog, self.configs, self.routing, self.meta, self.throttles, limits),
            data=DataContext(self.catalog, self.configs, self.storage, self.routing, self.throttles, self.txns),
            txn=TxnContext(self.catalog, self.routing, self.txns, self.coordinator, self.meta, self.producer_ids),
            groups=GroupContext(self.coordinator, self.catalog, self.meta, share, heartbeat_interval, self.configs),
            share=share,
            security=SecurityContext(self.meta, self.quotas, self.scram))

    @property
    def node_id(self) -> int:
        return self.local.node_id

    @node_id.setter
    def node_id(self, value: int) -> None:  # known once the broker has registered
        self.local.node_id = value

    @property
    def cluster_id(self) -> str:
        return self.local.cluster_id

    @property
    def advertised_host(self) -> str:
        return self.local.advertised_host

    @property
    def transactions(self):
        """The transaction coordinator (None: transactions are not enabled)."""
        return self.txns.coordinator

    @property
    def stream_txns(self):
        return self.txns.streams

    @property
    def txn_participants(self):
        return self.txns.participants

    async def start(self, *, serve: bool = True, plaintext: bool = True) -> None:
        """Bind the port; with ``serve=False`` connections wait in the backlog until ``serve()``.

        ``plaintext=False``: no PLAINTEXT listener (``port`` stays 0); ``add_listener`` adds the others.
        """
        from .wire.connection import KafkaConnection

        self.local.cluster_id = await self._cluster_id()
        self.coordinator.start()
        self._lag_metrics = lag.register(self.meta, self.catalog, self.routing.is_coordinator)
        if not plaintext:
            self.port = 0
            log.info("kafka: no PLAINTEXT listener (cluster %s)", self.cluster_id)
            return
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: KafkaConnection(self), self.host, self.port,
                                                  start_serving=serve)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        self.listener_ports["PLAINTEXT"] = self.port
        log.info("kafka listener on %s:%d (cluster %s)", self.host, self.port, self.cluster_id)

    async def add_listener(self, protocol: str, host: str, port: int, *, ssl=None, offload=None) -> int:
        """Bind a listener of security ``protocol`` (``SSL``: ``ssl`` is the server's SSLContext; with
        ``offload``, a ``TlsOffload``, its worker processes end TLS); its port.

        Accepts connections from ``serve()`` on.
        """
        from ...tls_offload.pool import tls_server
        from .wire.connection import KafkaConnection

        if protocol.startswith("SASL_") and self.sasl is None:
            raise ValueError(f"a {protocol} listener needs SASL settings")
        def factory():
            return KafkaConnection(self, protocol=protocol)

        if ssl is None:
            server = await asyncio.get_running_loop().create_server(factory, host, port, start_serving=False)
            bound = server.sockets[0].getsockname()[1] if port == 0 else port
        else:
            server, bound = await tls_server(f"kafka {protocol}", factory, host, port, ssl, offload)
        self._listener_servers.append(server)
        self.listener_ports[protocol] = bound
        log.info("kafka %s listener on %s:%d", protocol, host, bound)
        return bound

    def enable_transactions(self, coordinator, streams, participants) -> None:
        """Serve the transactional APIs with ``coordinator`` (nereus.transactions): long polls held
        at a last stable offset wake on changes of ``streams`` (StreamTransactions), and group
        offsets of TxnOffsetCommit are completed for ``participants`` when their transaction ends."""
        self.txns.coordinator, self.txns.streams, self.txns.participants = coordinator, streams, participants
        streams.add_listener(self.txns.signals.changed)
        participants.register_group_completer(
            lambda group, pid, epoch, commit, sequence: txn_offsets.complete_group(
                self.meta, self.coordinator, group, pid, epoch, commit, sequence))
        if self.authorizer is None:
            participants.register_remote_marker_writer(txn_markers.send_marker)
        else:
            log.info("kafka: brokers have no credentials for each other's listeners: markers of partitions "
                     "another broker owns are written by that broker when it sees the decision")
            coordinator.follow_decisions()

    async def _cluster_id(self) -> str:
        rec = await self.meta.get(CLUSTER_ID_KEY)
        if rec is None:
            try:
                await self.meta.put(CLUSTER_ID_KEY, uuid.uuid4().hex[:22].encode(), expected_version_id=EXPECT_ABSENT)
            except UnexpectedVersion:
                pass
            rec = await self.meta.get(CLUSTER_ID_KEY)
        return rec.value.decode()

    async def serve(self) -> None:
        """Start accepting connections (after ``start(serve=False)``)."""
        for server in [self._server, *self._listener_servers]:
            if server is not None and not server.is_serving():
                await server.start_serving()

    async def stop(self) -> None:
        for server in [self._server, *self._listener_servers]:
            if server is not None:
                server.close()
        for conn in list(self.connections):
            conn.close()
        await self.coordinator.stop()
        await self.share_groups.close()
        await self.catalog.close()
        await lag.unregister(self._lag_metrics)
        self._lag_metrics = None
        for server in [self._server, *self._listener_servers]:
            if server is not None:
                await server.wait_closed()


__all__ = ["KafkaService"]
