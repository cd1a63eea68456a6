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
from ...storage import StreamStorage
from ..codec import DEFAULT_MAX_MESSAGE_SIZE
from . import metrics
from .topics import Topic

log = logging.getLogger(__name__)


class PulsarService:
    """One Pulsar protocol endpoint over a StreamStorage."""

    def __init__(self, storage: StreamStorage, meta: MetadataStore, *, host: str = "127.0.0.1", port: int = 6650,
                 advertised_host: str | None = None, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
                 keepalive: float = 30.0) -> None:
        self.storage = storage
        self.meta = meta
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or (host if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.max_message_size = max_message_size
        self.keepalive = keepalive
        self.topics: dict[str, Topic] = {}
        self.connections: set = set()
        self.broker_id = uuid.uuid4().hex[:8]  # makes generated producer names unique across restarts
        self._tokens = itertools.count(1)
        self._names = itertools.count(0)
        self._loading: dict[str, asyncio.Future] = {}
        self._server: asyncio.base_events.Server | None = None
        self._collector = None

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised_host}:{self.port}"

    def next_token(self) -> int:
        return next(self._tokens)

    def producer_name(self) -> str:
        return f"nereus-{self.broker_id}-{next(self._names)}"

    async def start(self) -> None:
        from .connection import ServerConnection

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: ServerConnection(self), self.host, self.port)
        if self.port == 0:
            self.port = self._server.sockets[0].getsockname()[1]
        self._collector = metrics.register(self)
        log.info("pulsar listener on %s:%d (service url %s)", self.host, self.port, self.service_url)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        for topic in list(self.topics.values()):
            try:
                await topic.close()
            except Exception:
                log.exception("closing topic %s failed", topic.name)
        self.topics.clear()
        if self._collector is not None:
            metrics.unregister(self._collector)
            self._collector = None
        if self._server is not None:
            await self._server.wait_closed()

    async def get_topic(self, name: TopicName) -> Topic:
        """The loaded topic, opening (and auto-creating) its stream on first use."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        loading = self._loading.get(key)
        if loading is None:
            loading = self._loading[key] = asyncio.ensure_future(self._load(name))
            loading.add_done_callback(lambda _f: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load(self, name: TopicName) -> Topic:
        handle = await self.storage.open_stream(str(name), create=True)
        topic = Topic(self, name, handle)
        await topic.load()
        self.topics[str(name)] = topic
        log.info("topic %s loaded (stream %d, next offset %d)", name, handle.stream_id, handle.next_offset())
        return topic


__all__ = ["PulsarService"]
