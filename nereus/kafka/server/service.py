"""The Kafka listener of one broker.

``KafkaService(storage, meta, registry, host=..., port=...)``; ``await start()``
binds the port, ``await stop()`` closes connections and flushes group state.
Partitions share the Pulsar service's loaded topics, so one stream has one
append session in this process whichever protocol writes to it. Where the
cluster is (other brokers, leaders, coordinators, nearest replicas) comes from
the registry's placement (``routing.py``); alone, this broker is node 0 and
leads every partition.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from ...meta import EXPECT_ABSENT, MetadataStore, UnexpectedVersion
from ...net_limits import ConnectionLimits
from ...storage import StreamStorage
from ...topics.partitioned import MAX_PARTITIONS
from ...transactions.producer_ids import ProducerIds
from .catalog import routing
from .groups import txn_offsets
from .txn import markers as txn_markers
from .wire import metrics
from .catalog.catalog import Catalog
from .admin.configs_api import TopicConfigs
from .catalog.producer_state import EXPIRATION_SECONDS, MAX_PRODUCERS
from .security.sasl import SaslSettings
from .security.quota_store import QuotaStore
from .security.quotas import ConnectionRates, Throttles
from .security.scram_store import ScramStore
from .share.groups import ShareGroups
from .groups.coordinator import Coordinator
from .txn.data_path import TxnSignals

log = logging.getLogger(__name__)

CLUSTER_ID_KEY = "/nereus/kafka/cluster-id"


class KafkaService:
    """One Kafka protocol endpoint over a StreamStorage and the broker's topic registry."""

    def __init__(self, storage: StreamStorage, meta: MetadataStore, registry, *, host: str = "127.0.0.1",
                 port: int = 9092, advertised_host: str | None = None, node_id: int = 0,
                 max_request_size: int = 100 << 20, max_message_bytes: int = 8 << 20,
                 auto_create: bool = True, default_partitions: int = 1, max_partitions: int = MAX_PARTITIONS,
                 max_replication_factor: int = 32,
                 producer_expiration_seconds: float = EXPIRATION_SECONDS,
                 max_producers_per_partition: int = MAX_PRODUCERS, sasl: SaslSettings | None = None,
                 limits: ConnectionLimits | None = None, authorizer=None, anonymous_role: str | None = None,
                 consumer_heartbeat_interval: float = 2.0, consumer_session_timeout: float = 45.0,
                 max_connection_creation_rate: float = 0) -> None:
        self.storage = storage
        self.authorizer = authorizer  # nereus.auth.authorization.Authorizer; None: authorization disabled
        self.anonymous_role = anonymous_role  # the principal of clients on listeners without SASL
        self.meta = meta
        self.registry = registry
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.node_id = node_id
        self.max_request_size = max_request_size
        self.limits = limits or ConnectionLimits(protocol="kafka")  # connections per IP, slow frames
        self.max_message_bytes = max_message_bytes
        self.auto_create = auto_create
        self.default_partitions = default_partitions
        self.max_partitions = max_partitions  # maxNumPartitionsPerPartitionedTopic in force
        self.max_replication_factor = max_replication_factor  # any factor up to it is accepted and reported
        # Idempotent producer state per partition: forgotten after this long idle, and capped in count.
        self.producer_state_options = {"expiration_seconds": producer_expiration_seconds,
                                       "max_producers": max_producers_per_partition}
        self.sasl = sasl  # the SASL_PLAINTEXT / SASL_SSL listeners' mechanisms and token check
        self.scram = ScramStore(meta)
        self.quotas = QuotaStore(meta)  # client quotas, enforced through self.throttles
        self.throttles = Throttles(self.quotas)
        # the ip entities' connection_creation_rate, and the broker's max.connection.creation.rate
        self.connection_rates = ConnectionRates(self.quotas, broker_rate=max_connection_creation_rate)
        self.cluster_id = ""
        self.connections: set = set()
        self.catalog = Catalog(self)
        self.configs = TopicConfigs(self)
        self.share_groups = ShareGroups(self)
        # KIP-848 consumer groups: told to members (interval) and enforced (session), in seconds
        self.consumer_heartbeat_interval = consumer_heartbeat_interval
        self.coordinator = Coordinator(meta, serves=lambda group_id: routing.is_coordinator(self, group_id),
                                       consumer_session_timeout=consumer_session_timeout)
        self.producer_ids = ProducerIds(meta)
        # The broker's transactions (set by the broker; None: not enabled): the coordinator, the stream
        # transaction index and the participants that write markers
        self.transactions = None
        self.stream_txns = None
        self.txn_participants = None
        self.txn_signals = TxnSignals()
        self._server: asyncio.base_events.Server | None = None
        self._listener_servers: list[asyncio.base_events.Server] = []
        # Port of each listener by security protocol (PLAINTEXT: ``port``): what Metadata tells its clients.
        self.listener_ports: dict[str, int] = {}
        self._lag_metrics = None

    async def start(self, *, serve: bool = True, plaintext: bool = True) -> None:
        """Bind the port; with ``serve=False`` connections wait in the backlog until ``serve()``.

        ``plaintext=False``: no PLAINTEXT listener (``port`` stays 0); ``add_listener`` adds the others.
        """
        from .wire.connection import KafkaConnection

        self.cluster_id = await self._cluster_id()
        self.coordinator.start()
        self._lag_metrics = metrics.register(self)
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
        self.transactions = coordinator
        self.stream_txns = streams
        self.txn_participants = participants
        streams.add_listener(self.txn_signals.changed)
        participants.register_group_completer(
            lambda group, pid, epoch, commit: txn_offsets.complete_group(self, group, pid, epoch, commit))
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
        await metrics.unregister(self._lag_metrics)
        self._lag_metrics = None
        for server in [self._server, *self._listener_servers]:
            if server is not None:
                await server.wait_closed()


__all__ = ["KafkaService"]
