"""The Pulsar listener: accepts connections and keeps the loaded topics.

``PulsarService(storage, meta, host=..., port=...)``; ``await start()`` binds the
port, ``await stop()`` closes connections, persists cursors and dedup snapshots,
and releases the streams' append sessions.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid

from ...ledger.naming import TopicName
from ...meta import MetadataStore
from ...net_limits import ConnectionLimits
from ...storage import StreamStorage
from ...topics import TopicRegistry
from ...ledger.policies import ensure_default_namespace
from ...codec.pulsar import DEFAULT_MAX_MESSAGE_SIZE
from . import metrics
from .nonpersistent import NonPersistentTopic
from .topics import ATTACHMENT, PulsarTopic

log = logging.getLogger(__name__)


class PulsarService:
    """One Pulsar protocol endpoint over a StreamStorage."""

    def __init__(self, storage: StreamStorage, meta: MetadataStore, *, host: str = "127.0.0.1", port: int = 6650,
                 advertised_host: str | None = None, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 keepalive: float = 30.0, registry: TopicRegistry | None = None, authenticator=None,
                 limits: ConnectionLimits | None = None, authorizer=None) -> None:
        self.storage = storage
        self.meta = meta
        self._own_registry = registry is None
        self.registry = registry if registry is not None else TopicRegistry(storage, meta)
        self.registry.on_any_append(_appended)
        self.registry.on_any_unload(_unloaded)
        self.registry.busy_while_any(_connected)
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.max_message_size = max_message_size
        self.keepalive = keepalive
        self.limits = limits or ConnectionLimits(protocol="pulsar")  # connections per IP, slow frames
        self.authenticator = authenticator  # nereus.auth.Authenticator; None: authentication disabled
        self.authorizer = authorizer  # nereus.auth.authorization.Authorizer; None: authorization disabled
        self.topics: dict[str, PulsarTopic] = {}
        self.connections: set = set()
        self.broker_id = uuid.uuid4().hex[:8]  # makes generated producer names unique across restarts
        self._tokens = itertools.count(1)
        self._names = itertools.count(0)
        self._server: asyncio.base_events.Server | None = None
        self._listener_servers: list[asyncio.base_events.Server] = []
        self._collector = None
        self.advertised_url: str | None = None  # the internal advertised listener's URL, when one is configured
        self.tls_port: int | None = None  # brokerServicePortTls, once bound
        # Transactions (set by the broker): the coordinator, the streams' transaction index
        # (its changes wake the dispatchers waiting at an LSO) and the participants (which
        # complete this layer's pending acks).
        self.transactions = None
        self.stream_txns = None
        self.txn_participants = None
        self.by_stream: dict[int, PulsarTopic] = {}  # loaded persistent topics by stream id
        self.replication = None  # the ReplicationManager, when the broker replicates to other clusters
        self.topic_metrics = metrics.TopicMetricsLevel()  # per topic or per namespace (the broker's options)

    @property
    def service_url(self) -> str:
        return self.advertised_url or f"pulsar://{self.advertised_host}:{self.port}"

    @property
    def service_url_tls(self) -> str:
        """``pulsar+ssl://host:port`` of the TLS listener; "" without one."""
        return f"pulsar+ssl://{self.advertised_host}:{self.tls_port}" if self.tls_port is not None else ""

    def enable_transactions(self, coordinator, streams, participants) -> None:
        """Serve the transaction commands with ``coordinator`` (nereus.transactions), read
        visibility from ``streams`` (StreamTransactions), and complete pending acks for
        ``participants`` (BrokerParticipants)."""
        self.transactions = coordinator
        self.stream_txns = streams
        self.txn_participants = participants
        from .pending_acks import SubscriptionCompleter  # pending acks need the service's topics: import late

        streams.add_listener(self._txn_index_changed)
        participants.register_subscription_completer(SubscriptionCompleter(self))
        participants.add_marker_listener(_marker_coming)

    def _txn_index_changed(self, stream_id: int) -> None:
        topic = self.by_stream.get(stream_id)
        if topic is not None:
            topic.txn_index_changed()

    def next_token(self) -> int:
        return next(self._tokens)

    def producer_name(self) -> str:
        return f"nereus-{self.broker_id}-{next(self._names)}"

    async def start(self, *, serve: bool = True) -> None:
        """Bind the port; with ``serve=False`` connections wait in the backlog until ``serve()``."""
        from .connection import ServerConnection

        await ensure_default_namespace(self.meta)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: ServerConnection(self), self.host, self.port,
                                                  start_serving=serve)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        self._collector = metrics.register(self)
        if self._own_registry:
            self.registry.start()
        log.info("pulsar listener on %s:%d (service url %s)", self.host, self.port, self.service_url)

    async def add_listener(self, name: str, host: str, port: int) -> None:
        """Bind ``host:port`` too, for advertised listener ``name``: its connections' lookups default to it.

        Accepts connections from ``serve()`` on.
        """
        from .connection import ServerConnection

        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: ServerConnection(self, listener=name), host, port,
                                          start_serving=False)
        self._listener_servers.append(server)
        log.info("pulsar listener %r on %s:%d", name, host, port)

    async def add_tls_listener(self, host: str, port: int, context, *, offload=None) -> None:
        """Bind ``host:port`` for ``pulsar+ssl://`` clients (``context``: the server's SSLContext; with
        ``offload``, a ``TlsOffload``, its worker processes end TLS).

        Accepts connections from ``serve()`` on.
        """
        from ...tls_offload.pool import tls_server
        from .connection import ServerConnection

        server, self.tls_port = await tls_server("pulsar-tls", lambda: ServerConnection(self), host, port, context,
                                                 offload)
        self._listener_servers.append(server)
        log.info("pulsar TLS listener on %s:%d (service url %s)", host, self.tls_port, self.service_url_tls)

    async def serve(self) -> None:
        """Start accepting connections (after ``start(serve=False)``)."""
        for server in [self._server, *self._listener_servers]:
            if server is not None and not server.is_serving():
                await server.start_serving()

    async def stop(self) -> None:
        for server in self._listener_servers:
            server.close()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._own_registry:
            await self.registry.close()
        for topic in list(self.topics.values()):
            try:
                await topic.close()
            except Exception:
                log.exception("closing topic %s failed", topic.name)
        self.topics.clear()
        if self._collector is not None:
            metrics.unregister(self._collector)
            self._collector = None
        for server in [self._server, *self._listener_servers]:
            if server is not None:
                await server.wait_closed()

    async def get_topic(self, name: TopicName, *, likely_absent: bool = False) -> PulsarTopic | NonPersistentTopic:
        """The loaded topic's Pulsar state, loading the topic on first use.

        Raises NotOwner when another broker serves the topic (Pulsar clients then look it up again).
        ``likely_absent``: the caller just found no such topic (it is created without a read first).
        """
        await self.registry.claim(name)
        if name.domain == "non-persistent":
            memory = self.registry.memory_topics
            topic = memory.get(str(name))
            if topic is None or topic.closed:
                topic = memory[str(name)] = NonPersistentTopic(self, name)
            return topic
        while True:
            core = await self.registry.get(name, likely_absent=likely_absent)
            topic = core.attachments.get(ATTACHMENT)
            if topic is None and not core.closed:
                topic = PulsarTopic(self, core)
            if topic is not None and not core.closed:
                self.topics[str(name)] = topic
                return topic


def _appended(core) -> None:
    topic = core.attachments.get(ATTACHMENT)
    if topic is not None:
        topic.appended()


async def _unloaded(core, reason: str) -> None:
    topic = core.attachments.get(ATTACHMENT)
    if topic is not None:
        await topic.unloaded(reason)


def _connected(core) -> bool:
    topic = core.attachments.get(ATTACHMENT)
    return topic is not None and topic.connected()


def _marker_coming(core, pid: int) -> None:
    """A transaction's marker is about to be appended: a later SEND of it is checked again (refused)."""
    topic = core.attachments.get(ATTACHMENT)
    if topic is not None and pid in topic.txn_begun:
        del topic.txn_begun[pid]


__all__ = ["PulsarService"]
