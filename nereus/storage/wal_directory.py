"""Where WAL replicas listen, for processes that run none: Spark tasks, the compaction worker.

Each broker with a WAL replica records its service's address under the replica's id
(``record_address``). A process without a broker registry reads those records
(``RecordedWalDirectory``) to fetch objects that are acknowledged on WAL replicas and not
uploaded yet; it never writes to a replica, so it knows no live set and no local one.
"""

from __future__ import annotations

import asyncio
import logging
import ssl as ssl_module
import time
from collections.abc import Callable, Iterable

from ..meta import MetadataStore
from ..wal.client import WalReplicaClient
from . import records
from .wal_replicas import ReplicaInfo, WalReplica

log = logging.getLogger(__name__)

#: A replica's address is read again after this long (a restarted broker may listen elsewhere).
REFRESH_SECONDS = 10.0


async def record_address(meta: MetadataStore, replica_id: str, address: str, *, tls: bool, zone: str = "") -> None:
    """Record that replica ``replica_id``'s service listens at ``address`` (``host:port``)."""
    value = records.encode({"address": address, "tls": tls, "zone": zone})
    current = await meta.get(records.wal_replica_key(replica_id))
    if current is None or current.value != value:
        await meta.put(records.wal_replica_key(replica_id), value)


class RecordedWalDirectory:
    """Read-only handles on the WAL replicas named in the metadata plane's address records.

    ``ssl``: the client context for replicas served over TLS (without one they are skipped:
    such a service takes only clients with a certificate); ``token``: the credentials shown to
    replicas that authenticate their clients.
    """

    def __init__(self, meta: MetadataStore, *, ssl: ssl_module.SSLContext | None = None,
                 token: Callable[[], bytes] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.meta = meta
        self.ssl = ssl
        self.token = token
        self._clock = clock
        # replica id -> (when read, address or None when unusable, client)
        self._known: dict[str, tuple[float, str | None, WalReplicaClient | None]] = {}

    def local_id(self) -> str | None:
        return None

    def live(self) -> list[ReplicaInfo]:
        return []  # this directory only reads

    def replica(self, replica_id: str) -> WalReplica | None:
        known = self._known.get(replica_id)
        return known[2] if known is not None else None

    async def prepare(self, replica_ids: Iterable[str]) -> None:
        """Read the address records of ``replica_ids`` not read lately."""
        now = self._clock()
        stale = [r for r in replica_ids if r not in self._known or now - self._known[r][0] >= REFRESH_SECONDS]
        found = await asyncio.gather(*(self.meta.get(records.wal_replica_key(r)) for r in stale))
        for replica_id, record in zip(stale, found):
            self._remember(replica_id, now, records.decode(record.value) if record is not None else None)

    def _remember(self, replica_id: str, now: float, value: dict | None) -> None:
        address = value.get("address") if value else None
        if value and value.get("tls") and self.ssl is None:
            log.info("WAL replica %s is served over TLS and no client certificate was given: not read", replica_id)
            address = None
        old = self._known.get(replica_id)
        if old is not None and old[1] == address:
            self._known[replica_id] = (now, address, old[2])
            return
        if old is not None and old[2] is not None:
            asyncio.ensure_future(old[2].close())
        client = None
        if address:
            host, _, port = address.rpartition(":")
            client = WalReplicaClient(host, int(port), ssl=self.ssl if value.get("tls") else None, token=self.token)
        self._known[replica_id] = (now, address, client)

    async def close(self) -> None:
        clients = [client for _, _, client in self._known.values() if client is not None]
        self._known = {}
        await asyncio.gather(*(client.close() for client in clients), return_exceptions=True)


__all__ = ["RecordedWalDirectory", "record_address"]
