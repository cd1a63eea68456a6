"""The embedded metadata engine: namespaces of hash-range shards in one process.

Layout under ``data_dir``::

    LOCK                          flock'd while an engine has the directory open
    <namespace>/NAMESPACE.json    {"shards": N}: fixed once created (routing depends on it)
    <namespace>/shard-<i>/        LMDB environment of shard i

Without a ``data_dir`` the same code runs on a private directory under /dev/shm
(RAM), without fsync, deleted on close: the in-memory mode.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import re
import shutil
import tempfile
import weakref

from ..api import Comparison
from ..errors import InvalidRequest, MetadataClosed, NamespaceNotFound
from ..keys import shard_index
from .client import EmbeddedMetadataStore
from .notify import NotificationHub
from .sessions import Clock, Sweeper
from .shard import Shard
from .store import CLOSE_SESSION, GET

log = logging.getLogger(__name__)

DEFAULT_NAMESPACE = "default"
_NS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class Namespace:
    """The shards of one namespace plus its notification hub."""

    def __init__(self, name: str, shards: list[Shard], hub: NotificationHub):
        self.name = name
        self.shards = shards
        self.hub = hub

    def shard_for(self, routing_key: str) -> Shard:
        return self.shards[shard_index(routing_key, len(self.shards))]


class Engine:
    """Hosts namespaces; hand out clients with ``engine.client(namespace)``.

    ``shards`` is the shard count of namespaces created from now on (an existing
    namespace keeps the count it was created with); ``namespaces`` maps names to
    shard counts to create up front. ``clock`` is injectable for session tests.
    ``map_size`` is each shard's initial LMDB map (doubled whenever it fills up);
    ``notification_queue`` bounds each subscriber's backlog (see notify.py);
    ``sweep_interval`` is how often (real seconds) expired sessions are collected;
    ``resident_map_budget`` bounds the bytes of each shard's map kept mapped in the process,
    checked every ``resident_map_interval`` seconds (see residency.py; 0: unbounded).
    """

    def __init__(
        self,
        data_dir: str | None = None,
        *,
        shards: int = 4,
        namespaces: dict[str, int] | None = None,
        create_namespaces: bool = True,
        clock: Clock | None = None,
        map_size: int = 1 << 30,
        notification_queue: int = 100_000,
        sweep_interval: float = 0.5,
        resident_map_budget: int = 256 << 20,
        resident_map_interval: float = 5.0,
    ):
        if shards < 1:
            raise ValueError("shards must be >= 1")
        self.clock = clock or Clock()
        self.default_shards = shards
        self.durable = data_dir is not None
        self._create_namespaces = create_namespaces
        self._map_size = map_size
        self._resident = (resident_map_budget, resident_map_interval)
        self._queue_size = notification_queue
        self._closed = False
        if data_dir is None:
            base = "/dev/shm" if os.path.isdir("/dev/shm") else None
            self.data_dir = tempfile.mkdtemp(prefix="nereus-meta-", dir=base)
            # Removed by close(), or at interpreter exit if the engine was never closed.
            weakref.finalize(self, shutil.rmtree, self.data_dir, True)
        else:
            self.data_dir = os.path.abspath(data_dir)
            os.makedirs(self.data_dir, exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.data_dir, "LOCK"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise RuntimeError(f"metadata data dir {self.data_dir} is in use by another engine") from None
        self._namespaces: dict[str, Namespace] = {}
        for name, count in {DEFAULT_NAMESPACE: shards, **(namespaces or {})}.items():
            self._open_namespace(name, count)
        self._sweeper = Sweeper(self._sweep, sweep_interval)

    # ------------------------------------------------------------ namespaces
    def namespace(self, name: str = DEFAULT_NAMESPACE) -> Namespace:
        if self._closed:
            raise MetadataClosed("metadata engine is closed")
        ns = self._namespaces.get(name)
        if ns is None:
            if not self._create_namespaces:
                raise NamespaceNotFound(name)
            ns = self._open_namespace(name, self.default_shards)
        return ns

    def _open_namespace(self, name: str, shards: int) -> Namespace:
        if not _NS_NAME.match(name):
            raise InvalidRequest(f"invalid namespace name {name!r}")
        ns_dir = os.path.join(self.data_dir, name)
        conf_path = os.path.join(ns_dir, "NAMESPACE.json")
        if os.path.exists(conf_path):
            with open(conf_path) as f:
                stored = json.load(f)["shards"]
            if stored != shards:
                log.warning("namespace %s keeps its %d shards (asked for %d)", name, stored, shards)
            shards = stored
        else:
            os.makedirs(ns_dir, exist_ok=True)
            tmp = conf_path + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"shards": shards}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, conf_path)
        hub = NotificationHub(self._queue_size)
        shard_list = [
            Shard(f"{name}/{i}", os.path.join(ns_dir, f"shard-{i}"), durable=self.durable,
                  map_size=self._map_size, clock=self.clock, hub=hub, index=i,
                  resident=self._resident)
            for i in range(shards)
        ]
        ns = Namespace(name, shard_list, hub)
        self._namespaces[name] = ns
        log.info("namespace %s: %d shards under %s", name, shards, ns_dir)
        return ns

    def client(self, namespace: str = DEFAULT_NAMESPACE, *, identity: str | None = None,
               session_timeout: float = 15.0) -> EmbeddedMetadataStore:
        """A ``MetadataStore`` on ``namespace`` (created on demand unless disabled)."""
        return EmbeddedMetadataStore(self, self.namespace(namespace), identity=identity,
                                     session_timeout=session_timeout)

    # --------------------------------------------------------------- sessions
    def _sweep(self) -> list[tuple[Shard, int]]:
        """Queue the closing of every expired session; returns what was queued."""
        queued = []
        for ns in list(self._namespaces.values()):
            for shard in ns.shards:
                for sid in shard.sessions.take_expired():
                    log.info("session %d on shard %s expired", sid, shard.name)
                    try:
                        shard.submit((CLOSE_SESSION, None, sid))
                    except MetadataClosed:
                        return queued
                    queued.append((shard, sid))
        return queued

    async def expire_sessions(self) -> int:
        """Expire overdue sessions now and wait until their records are gone (tests).

        Returns how many sessions this call expired (the sweeper thread may have
        taken some first; their cleanup is awaited too).
        """
        expired = self._sweep()
        # Each shard runs its queue in order, so a no-op read queued behind the
        # closes (ours or the sweeper's) resolves only after they committed.
        shards = [s for ns in list(self._namespaces.values()) for s in ns.shards]
        await asyncio.gather(*(s.call(GET, b"\x00", Comparison.EQUAL, False) for s in shards))
        return len(expired)

    # ------------------------------------------------------------------ close
    async def close(self) -> None:
        """Stop every shard (queued operations finish first). Sessions stay persisted."""
        if self._closed:
            return
        self._closed = True
        self._sweeper.stop()
        shards = [s for ns in self._namespaces.values() for s in ns.shards]
        for s in shards:
            s.close()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(None, s.stopped.wait) for s in shards))
        for ns in self._namespaces.values():
            ns.hub.close_all()
        fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        os.close(self._lock_fd)
        if not self.durable:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    async def __aenter__(self) -> "Engine":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
