"""One broker: storage, topic registry, Pulsar/Kafka/HTTP listeners and its cluster membership.

``nereus broker`` runs one over a remote metadata service and a shared object
store; ``nereus standalone`` runs one beside its embedded metadata engine. Either
way the broker keeps nothing durable of its own: what it serves, it finds in the
metadata plane and the object store, and any other broker can take it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import importlib.metadata
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..auth import Authenticator, AuthSettings
from ..auth.authorization import Authorizer
from ..cyclic_gc import freeze_survivors, time_collector_pauses
from ..kafka.server import KafkaService
from ..ledger.policies import ensure_default_namespace
from ..kafka.server.share.groups import STREAMS_PREFIX
from ..meta import MetadataStore
from ..net_limits import (DEFAULT_FRAME_READ_TIMEOUT, DEFAULT_MAX_PENDING_BYTES, DEFAULT_MAX_PENDING_BYTES_PER_BROKER,
                          DEFAULT_MAX_PENDING_PUBLISH_REQUESTS, PendingBudget,
                          ConnectionLimits)
from ..objstore import ObjectStore
from ..pulsar.server import PulsarService
from ..pulsar.replication import ReplicationManager
from ..pulsar.replication.sweep import run_sweeps
from ..pulsar.server.policy_follower import follow_policies
from ..pulsar.server.metrics import TopicMetricsLevel
from ..transactions import BrokerParticipants, StreamTransactions, TransactionCoordinator
from ..storage import GarbageCollector, StorageOptions, StreamStorage, WalOptions
from ..storage import metrics as storage_metrics
from ..storage.wal_directory import record_address
from ..topics import BrokerAddress, NotOwner, Placement, TopicRegistry
from ..topics.autocreate import AutoCreation
from ..topics.partitioned import partition_limit
from ..tls import TlsOptions
from ..topics.dedup import BROKER_DEDUPLICATION_ENABLED
from .cluster import ClusterPlacement, Membership, node_id_for
from .cluster import metrics as cluster_metrics
from .cluster.lease import run_under_lease
from .http import add_https, attach_admin, start_http
from .iceberg_rest import sbt_catalog
from .listeners import AdvertisedListener
from .wal_replica import ClusterWalDirectory, LocalWal, default_durability, wal_credentials, wal_tls_contexts

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerOptions:
    bind: str = "127.0.0.1"
    http_port: int = 8080
    pulsar_port: int = 6650
    kafka_port: int | None = 9092  # None: no PLAINTEXT Kafka listener (an SSL or SASL one only)
    advertised_address: str | None = None  # default: the bind address (loopback for a wildcard)
    advertised_listeners: tuple[AdvertisedListener, ...] = ()  # Pulsar's advertisedListeners (listeners.py)
    internal_listener: str | None = None  # internalListenerName; default: the first advertised listener
    bind_addresses: tuple[tuple[str, str, int], ...] = ()  # Pulsar's bindAddresses: (listener, host, port)
    zone: str = "default"
    broker_name: str | None = None  # default: advertised address and ports
    cluster_name: str = "standalone"
    gc_interval: float = 30.0
    gc_grace: float = 60.0
    gc_pending_timeout: float = 60.0
    wal_profile: str = "object"  # where namespaces without a persistence policy keep acknowledged writes
    wal_dir: Path | None = None  # this broker's WAL replica (None: it holds none)
    wal_port: int = 0
    wal_max_bytes: int = 8 << 30
    wal_max_unuploaded_bytes: int = 1 << 30
    wal_upload_group_seconds: float = 0.5
    wal_ensemble: int = 2  # managedLedgerDefaultEnsembleSize
    wal_write_quorum: int = 2  # managedLedgerDefaultWriteQuorum
    wal_ack_quorum: int = 2  # managedLedgerDefaultAckQuorum
    broker_client_tls: bool = False  # brokerClientTlsEnabled: WAL replicas reached over mutual TLS
    broker_client_cert_file: str | None = None  # brokerClientCertificateFilePath
    broker_client_key_file: str | None = None  # brokerClientKeyFilePath
    broker_client_trust_certs_file: str | None = None  # brokerClientTrustCertsFilePath
    broker_client_auth_plugin: str | None = None  # brokerClientAuthenticationPlugin
    broker_client_auth_params: str | None = None  # brokerClientAuthenticationParameters: this broker's token
    compaction_interval: float = 2.0  # 0: no compaction schedule
    compaction_max_age: float = 2.0
    compaction_min_bytes: int = 8 << 20
    compaction_monitor_interval: float = 60.0  # seconds between compaction-threshold checks (0: none)
    rebalance_delay: float = 0.5
    lease_poll_seconds: float = 2.0
    session_timeout: float = 10.0
    topic_idle_seconds: float = 300.0  # a loaded topic with nothing attached is unloaded after this (0: never)
    expose_topic_level_metrics: bool = True  # exposeTopicLevelMetricsInPrometheus (else per namespace)
    topic_level_metrics_max_topics: int = 10_000  # loaded topics above which metrics are per namespace (0: none)
    auto_topic_creation: bool = True  # missing topics are created on first use (Pulsar and Kafka clients)
    auto_topic_creation_type: str = "non-partitioned"  # what a Pulsar client's first use creates
    default_partitions: int = 1  # partitions of an auto-created partitioned topic (and of Kafka's)
    max_partitions_per_topic: int = 0  # maxNumPartitionsPerPartitionedTopic (0: MAX_PARTITIONS, ours)
    max_replication_factor: int = 32  # the largest a Kafka client may create a topic with
    deduplication: bool = BROKER_DEDUPLICATION_ENABLED  # for namespaces without a policy
    # Retention of namespaces without a policy (defaultRetentionTimeInMinutes / SizeInMB; -1: keep all).
    default_retention_minutes: int = -1
    default_retention_mb: int = -1
    max_message_size: int | None = None  # bytes; None: each protocol's own default
    max_connections_per_ip: int = 0  # maxConnectionsPerIp, per protocol (0: unlimited)
    max_connection_creation_rate: float = 0  # Kafka's max.connection.creation.rate, a second (0: unlimited)
    frame_read_timeout: float = DEFAULT_FRAME_READ_TIMEOUT  # seconds a started frame may take to arrive whole
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES  # per connection: its socket is not read beyond
    max_pending_publish_requests: int = DEFAULT_MAX_PENDING_PUBLISH_REQUESTS  # Pulsar SENDs per connection
    max_pending_bytes_per_broker: int = DEFAULT_MAX_PENDING_BYTES_PER_BROKER  # over all Pulsar and Kafka connections
    schema_compatibility_strategy: str = "FULL"  # for namespaces and topics without a policy
    consumer_heartbeat_interval: float = 2.0  # group.consumer.heartbeat.interval.ms (KIP-848), in seconds
    consumer_session_timeout: float = 45.0  # group.consumer.session.timeout.ms, in seconds
    share_record_lock_duration: float = 30.0  # group.share.record.lock.duration.ms, in seconds
    share_delivery_count_limit: int = 5  # group.share.delivery.count.limit
    share_partition_max_record_locks: int = 2000  # group.share.partition.max.record.locks
    transactional_id_expiration: float = 7 * 24 * 3600.0  # transactional.id.expiration.ms, in seconds

    def kafka_broker_configs(self) -> dict[str, str]:
        """The Kafka broker configs these options set, as Kafka's ``DescribeConfigs`` shows them (static)."""
        return {"group.consumer.session.timeout.ms": str(round(self.consumer_session_timeout * 1000)),
                "group.consumer.heartbeat.interval.ms": str(round(self.consumer_heartbeat_interval * 1000)),
                "group.share.record.lock.duration.ms": str(round(self.share_record_lock_duration * 1000)),
                "group.share.delivery.count.limit": str(self.share_delivery_count_limit),
                "group.share.partition.max.record.locks": str(self.share_partition_max_record_locks)}

    def connection_limits(self, protocol: str, budget: PendingBudget | None = None) -> ConnectionLimits:
        return ConnectionLimits(self.max_connections_per_ip, self.frame_read_timeout, protocol=protocol,
                                max_pending_bytes=self.max_pending_bytes,
                                max_pending_publish_requests=self.max_pending_publish_requests, budget=budget)
    log_dir: Path | None = None  # the compaction worker's log; default: ./logs
    sbt_catalog_uri: str | None = None  # the built-in tables' catalog; default: beside a file:// object store
    authentication: AuthSettings = AuthSettings()  # authenticationEnabled and the providers' settings
    pulsar_tls_port: int | None = None  # brokerServicePortTls (pulsar+ssl://); None: no TLS listener
    http_tls_port: int | None = None  # webServicePortTls (HTTPS)
    kafka_ssl_port: int | None = None  # kafkaListeners' SSL://
    kafka_sasl_port: int | None = None  # kafkaListeners' SASL_PLAINTEXT://
    kafka_sasl_ssl_port: int | None = None  # kafkaListeners' SASL_SSL://
    sasl: object = None  # SaslSettings of the SASL listeners (nereus.kafka.server.security.sasl)
    tls: TlsOptions = TlsOptions()  # certificate, key and trust of every TLS listener
    # tlsOffloadProcesses: worker processes that end TLS of the Pulsar and Kafka TLS listeners (0: this process)
    tls_offload_processes: int = 0

    @property
    def partition_limit(self) -> int:
        """Most partitions a topic may be created or grown to (admin REST, Kafka, auto-creation)."""
        return partition_limit(self.max_partitions_per_topic)

    @property
    def tls_enabled(self) -> bool:
        return any(port is not None for port in (self.pulsar_tls_port, self.http_tls_port, self.kafka_ssl_port,
                                                 self.kafka_sasl_ssl_port))


class PortInUse(OSError):
    """A listener's port is taken by another process."""

    def __init__(self, listener: str, host: str, port: int) -> None:
        super().__init__(errno.EADDRINUSE, f"port {port} of the {listener} listener is already in use on {host}")
        self.listener, self.host, self.port = listener, host, port


async def bind_listener(listener: str, host: str, port: int, start):
    """Await ``start`` (a listener binding ``host:port``); a port in use raises ``PortInUse``."""
    try:
        return await start
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(listener, host, port) from None
        raise


def advertised(bind: str, advertised_address: str | None) -> str:
    if advertised_address:
        return advertised_address
    return "127.0.0.1" if bind in ("", "0.0.0.0", "::") else bind


class StartingPlacement(Placement):
    """Until the broker has registered it serves nothing (its node id and ring are unknown)."""

    async def lookup(self, topic: str, *, authoritative: bool = False):
        raise NotOwner("the broker is starting")

    async def claim(self, topic: str) -> None:
        raise NotOwner("the broker is starting")

    def owns(self, topic: str) -> bool:
        return False


@dataclass
class BrokerNode:
    """The running parts of one broker (for the CLI, admin and tests)."""

    options: BrokerOptions
    storage: StreamStorage
    registry: TopicRegistry
    pulsar: PulsarService
    kafka: KafkaService
    membership: Membership
    placement: ClusterPlacement
    http_port: int
    leases: dict
    transactions: TransactionCoordinator | None = None
    sbt_catalog: object | None = None  # iceberg_rest.sbt_catalog.CatalogLocation: where the built-in tables are

    @property
    def address(self) -> BrokerAddress:
        return self.membership.address

    async def drain(self) -> None:
        """Hand every topic over and take no new ones (the broker keeps running)."""
        from .cluster import DRAINING

        await self.membership.set_state(DRAINING)
        await self.placement.release_all("broker draining")


async def _gc_loop(collector: GarbageCollector, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            stats = await collector.collect()
            if stats.deleted or stats.resolved:
                log.info("gc: %d object(s) deleted, %d crashed write(s) resolved", stats.deleted, stats.resolved)
        except Exception:
            log.exception("gc pass failed")


async def _cancel_and_wait(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _version() -> str:
    try:
        return importlib.metadata.version("nereus")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _build_transactions(stack: contextlib.AsyncExitStack, meta: MetadataStore, registry: TopicRegistry,
                        kafka: KafkaService, pulsar: PulsarService,
                        transactional_id_expiration: float) -> TransactionCoordinator:
    """One coordinator and one stream transaction index per broker, shared by both protocols.

    Their state is in the metadata plane, so every broker of a cluster runs them (CAS
    settles races). The coordinator's loop (timeouts, recovery) is started by the caller
    once placement works, and stops before topics are handed over.
    """
    stream_txns = StreamTransactions(meta)
    stack.push_async_callback(stream_txns.close)
    registry.storage.trim_listeners.append(stream_txns.trimmed)  # retention drops trimmed aborted ranges
    registry.key_compactor.stable_end = stream_txns.read_view  # key views stop at the last stable offset
    participants = BrokerParticipants(registry, stream_txns)
    coordinator = TransactionCoordinator(meta, kafka.producer_ids, participants, stream_txns=stream_txns,
                                         transactional_id_expiration_ms=int(transactional_id_expiration * 1000))
    for service in (kafka, pulsar):
        service.enable_transactions(coordinator, stream_txns, participants)
    return coordinator


def _object_prefix(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


async def start_broker(stack: contextlib.AsyncExitStack, meta: MetadataStore, objects: ObjectStore, *,
                       objects_url: str, metadata_url: str, options: BrokerOptions) -> BrokerNode:
    """Start a broker; everything it opens is closed when ``stack`` unwinds (in reverse order)."""
    internal = next((li for li in options.advertised_listeners
                     if li.name == (options.internal_listener or options.advertised_listeners[0].name)), None)
    host = internal.host if internal is not None else advertised(options.bind, options.advertised_address)
    wal_server_ssl, wal_client_ssl = wal_tls_contexts(options)  # a bad file fails here
    authenticator = Authenticator(options.authentication) if options.authentication.enabled else None
    wal_token, wal_authenticate = wal_credentials(options, authenticator)
    local_wal = None
    if options.wal_dir is not None:
        local_wal = await bind_listener("wal", options.bind, options.wal_port,
                                        LocalWal.start(options.wal_dir, options.bind, options.wal_port,
                                                       max_bytes=options.wal_max_bytes, ssl=wal_server_ssl,
                                                       authenticate=wal_authenticate))
        stack.push_async_callback(local_wal.close)
    elif options.wal_profile == "local":
        raise ValueError("the local WAL profile needs a WAL directory (--wal-dir)")
    directory = ClusterWalDirectory(local_wal.replica_id if local_wal else None, local_wal.store if local_wal else None,
                                    zone=options.zone, ssl=wal_client_ssl, token=wal_token)
    stack.push_async_callback(directory.close)
    durability = default_durability(options.wal_profile, options.wal_ensemble, options.wal_write_quorum,
                                    options.wal_ack_quorum)
    storage_options = StorageOptions(wal=WalOptions(max_unuploaded_bytes=options.wal_max_unuploaded_bytes,
                                                    upload_group_seconds=options.wal_upload_group_seconds))
    storage = StreamStorage(meta, objects, node_id=f"{_object_prefix(options.broker_name or host)}-{os.getpid()}",
                            options=storage_options, directory=directory, durability=durability)
    stack.push_async_callback(storage.close)
    authorizer = Authorizer(meta, options.authentication.super_user_roles,
                            wildcards=options.authentication.authorization_wildcards) \
        if authenticator is not None and options.authentication.authorization_enabled else None
    budget = PendingBudget(options.max_pending_bytes_per_broker)  # one for every protocol's connections
    http_limits = options.connection_limits("http")
    http = await bind_listener("http", options.bind, options.http_port,
                               start_http(options.bind, options.http_port, authenticator=authenticator,
                                          authorizer=authorizer, limits=http_limits))
    stack.push_async_callback(http.cleanup)
    http_port = http.addresses[0][1] if options.http_port == 0 else options.http_port
    log.info("http listener on %s:%d (admin REST, lookup, metrics)", options.bind, http_port)
    tls_context = options.tls.server_context() if options.tls_enabled else None  # a bad file fails here
    https_port = None
    if options.http_tls_port is not None:
        https_port = await bind_listener("https", options.bind, options.http_tls_port,
                                         add_https(http, options.bind, options.http_tls_port, tls_context,
                                                   limits=http_limits))
        log.info("https listener on %s:%d", options.bind, https_port)
    starting = StartingPlacement(BrokerAddress("starting", -1, options.zone, "", host, 0, ""))
    auto_creation = AutoCreation(options.auto_topic_creation, options.auto_topic_creation_type,
                                 options.default_partitions)
    registry = TopicRegistry(storage, meta, placement=starting, deduplication_enabled=options.deduplication,
                             idle_seconds=options.topic_idle_seconds,
                             auto_creation=auto_creation,
                             schema_compatibility_strategy=options.schema_compatibility_strategy)
    registry.start()
    stack.push_async_callback(registry.close)
    sizes = {} if options.max_message_size is None else {"max_message_size": options.max_message_size}
    pulsar = PulsarService(storage, meta, host=options.bind, port=options.pulsar_port, advertised_host=host,
                           registry=registry, authenticator=authenticator, authorizer=authorizer,
                           limits=options.connection_limits("pulsar", budget), **sizes)
    # ``public`` allows this cluster by name (the Pulsar service alone would allow ``standalone``).
    await ensure_default_namespace(meta, options.cluster_name)
    # Bound now; clients are accepted once the broker registered.
    await bind_listener("pulsar", options.bind, options.pulsar_port, pulsar.start(serve=False))
    stack.push_async_callback(pulsar.stop)
    for listener, bind_host, port in options.bind_addresses:
        await bind_listener("bind-address", bind_host, port, pulsar.add_listener(listener, bind_host, port))
    offload = None
    if options.tls_offload_processes and any(port is not None for port in (
            options.pulsar_tls_port, options.kafka_ssl_port, options.kafka_sasl_ssl_port)):
        from ..tls_offload.pool import TlsOffload

        offload = TlsOffload(options.tls, options.tls_offload_processes)
        stack.push_async_callback(offload.close)  # after the listeners stop (the stack unwinds in reverse)
    if options.pulsar_tls_port is not None:
        await bind_listener("pulsar-tls", options.bind, options.pulsar_tls_port,
                            pulsar.add_tls_listener(options.bind, options.pulsar_tls_port, tls_context,
                                                    offload=offload))
    if internal is not None:
        pulsar.advertised_url = internal.pulsar_url
    kafka = KafkaService(storage, meta, registry, host=options.bind, port=options.kafka_port or 0, advertised_host=host,
                         sasl=options.sasl, authorizer=authorizer, limits=options.connection_limits("kafka", budget),
                         anonymous_role=authenticator.anonymous_role if authenticator is not None else None,
                         auto_create=options.auto_topic_creation, default_partitions=options.default_partitions,
                         max_partitions=options.partition_limit, max_replication_factor=options.max_replication_factor,
                         consumer_heartbeat_interval=options.consumer_heartbeat_interval,
                         consumer_session_timeout=options.consumer_session_timeout,
                         broker_configs=options.kafka_broker_configs(),
                         max_connection_creation_rate=options.max_connection_creation_rate,
                         **({} if options.max_message_size is None else {"max_message_bytes": options.max_message_size}))
    await bind_listener("kafka", options.bind, options.kafka_port or 0,
                        kafka.start(serve=False, plaintext=options.kafka_port is not None))
    stack.push_async_callback(kafka.stop)
    transactions = _build_transactions(stack, meta, registry, kafka, pulsar, options.transactional_id_expiration)
    pulsar.topic_metrics = TopicMetricsLevel(options.expose_topic_level_metrics, options.topic_level_metrics_max_topics)
    pulsar.replication = ReplicationManager(registry, meta, objects, options.cluster_name, service=pulsar)
    stack.push_async_callback(pulsar.replication.close)
    if options.kafka_ssl_port is not None:
        await bind_listener("kafka-ssl", options.bind, options.kafka_ssl_port,
                            kafka.add_listener("SSL", options.bind, options.kafka_ssl_port, ssl=tls_context,
                                               offload=offload))
    for protocol, port, ssl in (("SASL_PLAINTEXT", options.kafka_sasl_port, None),
                                ("SASL_SSL", options.kafka_sasl_ssl_port, tls_context)):
        if port is not None:
            await bind_listener(f"kafka-{protocol.lower().replace('_', '-')}", options.bind, port,
                                kafka.add_listener(protocol, options.bind, port, ssl=ssl,
                                                   offload=offload if ssl is not None else None))
    if offload is not None:
        await offload.start()  # the workers accept from here on; the broker serves them from serve()

    name = options.broker_name or f"{host}:{pulsar.port}:{kafka.port}:{http_port}"
    node_id = await node_id_for(meta, name)
    address = BrokerAddress(name, node_id, options.zone, pulsar.service_url, host, kafka.port,
                            (internal and internal.http_url) or f"http://{host}:{http_port}",
                            tuple(li.as_tuple() for li in options.advertised_listeners),
                            pulsar_tls_url=pulsar.service_url_tls,
                            https_url=f"https://{host}:{https_port}" if https_port is not None else "",
                            kafka_listeners=tuple((p, port) for p, port in kafka.listener_ports.items()
                                                  if p != "PLAINTEXT"),
                            wal_replica=local_wal.replica_id if local_wal else "",
                            wal_address=f"{host}:{local_wal.server.port}" if local_wal else "",
                            wal_tls=local_wal is not None and wal_server_ssl is not None)
    if local_wal is not None:  # for processes that follow no registry (Spark tasks, the compaction worker)
        await record_address(meta, local_wal.replica_id, address.wal_address, tls=address.wal_tls, zone=options.zone)
    membership = Membership(meta, address)
    directory.membership = membership
    follow_policies(pulsar, membership)  # policy changes made through other brokers
    # Share-group offsets altered or deleted through another broker (the group's coordinator).
    membership.on_note(STREAMS_PREFIX, kafka.share_groups.note_cursor)
    kafka.catalog.follow(membership)  # Metadata answered from the topics' listing, kept while changes are heard
    placement = ClusterPlacement(meta, membership, rebalance_delay=options.rebalance_delay,
                                 dead_owner_wait=options.session_timeout + 2)
    placement.bind(registry)
    kafka.node_id = node_id
    registry.placement = placement
    await membership.start()
    stack.push_async_callback(membership.stop)
    placement.start()
    # Unwinds before the listeners stop: hand the topics over first, so clients move at once.
    stack.push_async_callback(placement.release_all, "broker stopping")
    stack.push_async_callback(placement.stop)
    add_listener = getattr(meta, "add_session_listener", None)
    if add_listener is not None:
        add_listener(lambda: asyncio.ensure_future(placement.session_lost()))

    leases: dict = {}
    metrics = cluster_metrics.register(placement, leases)
    stack.callback(cluster_metrics.unregister, metrics)
    progress = storage_metrics.register_progress(meta)
    stack.push_async_callback(storage_metrics.unregister_progress, progress)
    holder = name
    collector = GarbageCollector(meta, objects, grace_seconds=options.gc_grace,
                                 pending_timeout_seconds=options.gc_pending_timeout, directory=directory)
    if local_wal is not None:
        local_wal.start_janitor(meta)
    workers = {"gc": lambda: _gc_loop(collector, options.gc_interval)}
    tables = sbt_catalog.location(objects_url, options.sbt_catalog_uri)
    if tables is None and options.compaction_interval > 0:
        log.warning("built-in tables off: the object store is not file:// and no --sbt-catalog is given "
                    "(compaction goes on without them)")
    if options.compaction_interval > 0:
        from .compaction_schedule import CompactionSchedule, run_schedule

        schedule = CompactionSchedule(options.compaction_interval, options.compaction_max_age,
                                      options.compaction_min_bytes, metadata_url, objects_url,
                                      Path(options.log_dir or "logs") / "compaction.log",
                                      catalog=None if tables is None else tables.uri)
        workers["compaction"] = lambda: run_schedule(meta, schedule)
    for worker, run in workers.items():
        task = asyncio.ensure_future(run_under_lease(meta, worker, holder, run, status=leases,
                                                     poll_seconds=options.lease_poll_seconds))
        stack.push_async_callback(_cancel_and_wait, task)
    transactions.start()
    stack.push_async_callback(transactions.close)
    sweeps = asyncio.ensure_future(run_sweeps(pulsar.replication))
    stack.push_async_callback(_cancel_and_wait, sweeps)
    node = BrokerNode(options, storage, registry, pulsar, kafka, membership, placement, http_port, leases,
                      transactions, tables)
    await attach_admin(http, storage=storage, meta=meta, pulsar=pulsar, node=node)
    await pulsar.serve()
    await kafka.serve()
    await membership.set_serving()
    log.info("broker %s ready (nereus %s, node %d, zone %s): pulsar=%s kafka=%s http=%s metadata=%s objects=%s",
             name, _version(), node_id, options.zone, address.pulsar_url, address.kafka_address, address.http_url,
             metadata_url, objects_url.partition("?")[0])  # the query may hold credentials
    if options.tls_enabled:
        log.info("TLS listeners: pulsar=%s https=%s kafka=%s", address.pulsar_tls_url or "-",
                 address.https_url or "-", ",".join(f"{p}://{host}:{port}" for p, port in address.kafka_listeners)
                 or "-")
    return node


def freeze_startup_objects() -> None:
    """Put what the imports loaded out of the cyclic collector's way, and from then on what
    survives each full collection (once, in a server process, before it listens: the
    collection first stalls the loop).

    Modules, classes and schemas (~100k objects) live as long as the process, and so do most
    of a loaded topic's objects; left in the oldest generation, every full collection walks
    them all, a pause of tens of ms to seconds for whatever request is being served. Frozen,
    a full collection walks only what serving made since (``nereus.cyclic_gc``). Not for
    processes that start brokers again and again (tests).
    """
    gc.collect()
    gc.freeze()
    time_collector_pauses()
    freeze_survivors()


__all__ = ["BrokerNode", "BrokerOptions", "PortInUse", "StartingPlacement", "advertised", "bind_listener",
           "freeze_startup_objects", "start_broker"]
