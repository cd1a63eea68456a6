"""This broker's WAL replica (BookKeeper's bookie role) and the cluster's directory of replicas.

A broker with a WAL directory opens a ``WalStore`` there and serves it on its WAL
port; its registration names the replica (the disk's id, kept in the directory) and
the address. Every broker's storage finds the replicas it writes to and reads from
through ``ClusterWalDirectory``, which follows the broker registry. A janitor drops
the blocks whose pending marker is gone (every object of them is in the object
store), so a replica never lists the object store to decide what to delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import ssl
import uuid
from collections.abc import Callable
from pathlib import Path

from ..auth import AuthConfigError
from ..auth.broker_client import broker_token, superuser_check
from ..meta import MetadataStore
from ..storage.wal_locator import drop_finished_blocks
from ..storage.wal_replicas import Durability, ReplicaInfo, WalReplica
from ..tls import TlsConfigError, client_context
from ..wal import WalServer, WalStore
from ..wal.client import WalReplicaClient
from .cluster import ACTIVE, Membership

log = logging.getLogger(__name__)

REPLICA_ID_FILE = "replica-id"
JANITOR_SECONDS = 30.0


def replica_id(directory: Path) -> str:
    """The id of the WAL in ``directory``: made once, then kept with the data it names."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / REPLICA_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    new = f"wal-{uuid.uuid4().hex[:16]}"
    temporary = path.with_suffix(".tmp")
    with open(temporary, "w") as out:
        out.write(new + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    return new


def wal_tls_contexts(options) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """(server, client) TLS contexts of the WAL replica service with ``brokerClientTlsEnabled``
    (None, None without): the service asks every client for a certificate signed by the broker's
    trusted CAs, and this broker shows its broker-client certificate to the others'. Raises
    TlsConfigError naming the setting that is missing or unusable."""
    if not options.broker_client_tls:
        return None, None
    if not options.tls.trust_file:
        raise TlsConfigError("brokerClientTlsEnabled needs tlsTrustCertsFilePath (--tls-trust-certs-file): the "
                             "WAL service verifies other brokers' certificates against it")
    if not options.broker_client_cert_file or not options.broker_client_key_file:
        raise TlsConfigError("brokerClientTlsEnabled needs brokerClientCertificateFilePath and brokerClientKeyFilePath "
                             "(--broker-client-cert-file, --broker-client-key-file)")
    server = dataclasses.replace(options.tls, allow_insecure=False, require_client_cert=True).server_context()
    client = client_context(options.broker_client_cert_file, options.broker_client_key_file,
                            options.broker_client_trust_certs_file or options.tls.trust_file)
    return server, client


def wal_credentials(options, authenticator) -> tuple[Callable[[], bytes] | None, Callable[[bytes], str] | None]:
    """(this broker's token for other WAL services, this WAL service's check of a client's token).

    With authentication and no mutual TLS (whose certificates are the proof), the service
    takes only a superuser's token, and a broker writing replicated needs one of its own
    (``brokerClientAuthenticationParameters``). Raises AuthConfigError saying what is missing.
    """
    token = broker_token(options.broker_client_auth_plugin, options.broker_client_auth_params)
    if authenticator is None or options.broker_client_tls:
        return token, None
    if options.wal_profile == "replicated" and "token" not in authenticator.methods:
        raise AuthConfigError("the replicated WAL profile with authenticationEnabled and no brokerClientTlsEnabled "
                              "needs the token provider (authenticationProviders): brokers reach each other's WAL "
                              "services with tokens")
    if token is None and options.wal_profile == "replicated":
        raise AuthConfigError("the replicated WAL profile with authenticationEnabled needs "
                              "brokerClientAuthenticationParameters (a superuser's token, --broker-client-auth-params) "
                              "or brokerClientTlsEnabled: other brokers' WAL services take nothing else")
    return token, superuser_check(authenticator, options.authentication.super_user_roles)


def default_durability(profile: str, ensemble: int, write_quorum: int, ack_quorum: int) -> Durability:
    """The broker's durability for namespaces without a persistence policy (the quorums matter to
    the replicated profile only). Raises ValueError with the reason."""
    if profile == "local":
        return Durability.local()
    if profile == "object":
        return Durability()
    return Durability(profile, ensemble, write_quorum, ack_quorum)


class ClusterWalDirectory:
    """The WAL replicas of the cluster, from the broker registry (and this broker's own store)."""

    def __init__(self, local_id: str | None = None, local_store: WalStore | None = None, *, zone: str = "",
                 ssl=None, token: Callable[[], bytes] | None = None) -> None:
        self._local_id = local_id
        self._local_store = local_store
        self.zone = zone
        self.ssl = ssl
        self.token = token
        self.membership: Membership | None = None  # set once the broker registered
        self._clients: dict[str, tuple[str, WalReplicaClient]] = {}

    def local_id(self) -> str | None:
        return self._local_id

    def live(self) -> list[ReplicaInfo]:
        found: dict[str, ReplicaInfo] = {}
        if self.membership is not None:
            for record in self.membership.brokers.values():
                address = record.address
                if address.wal_replica and record.state == ACTIVE:
                    found[address.wal_replica] = ReplicaInfo(address.wal_replica, address.zone)
        if self._local_id is not None and self._local_id not in found:
            found[self._local_id] = ReplicaInfo(self._local_id, self.zone)
        return list(found.values())

    def replica(self, replica_id: str) -> WalReplica | None:
        if replica_id == self._local_id:
            return self._local_store
        address = self._address(replica_id)
        if address is None:
            cached = self._clients.get(replica_id)
            return cached[1] if cached is not None else None  # gone from the registry: try where it was
        cached = self._clients.get(replica_id)
        if cached is not None and cached[0] == address:
            return cached[1]
        host, _, port = address[0].rpartition(":")
        client = WalReplicaClient(host, int(port), ssl=self.ssl if address[1] else None, token=self.token)
        if cached is not None:
            asyncio.ensure_future(cached[1].close())
        self._clients[replica_id] = (address, client)
        return client

    async def prepare(self, replica_ids) -> None:
        return None  # the registry is followed: every replica's address is known already

    def _address(self, replica_id: str) -> tuple[str, bool] | None:
        """(host:port, over TLS) of a replica's service, from the registry."""
        if self.membership is None:
            return None
        for record in self.membership.brokers.values():
            if record.address.wal_replica == replica_id:
                return record.address.wal_address, record.address.wal_tls
        return None

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(client.close() for _, client in clients), return_exceptions=True)


class LocalWal:
    """This broker's WAL replica: the store, its service and its janitor."""

    def __init__(self, store: WalStore, server: WalServer, replica: str) -> None:
        self.store = store
        self.server = server
        self.replica_id = replica
        self._janitor: asyncio.Task | None = None

    @classmethod
    async def start(cls, directory: Path, host: str, port: int, *, max_bytes: int, ssl=None,
                    authenticate: Callable[[bytes], tuple[str, float | None]] | None = None) -> "LocalWal":
        replica = replica_id(directory)
        store = await WalStore.open(directory, max_bytes=max_bytes)
        server = WalServer(store, host, port, ssl=ssl, authenticate=authenticate)
        try:
            await server.start()
        except BaseException:
            await store.close()
            raise
        log.info("WAL replica %s on %s:%d (%s, %d block(s) held)", replica, host, server.port, directory,
                 len(store.blocks()))
        return cls(store, server, replica)

    def start_janitor(self, meta: MetadataStore, interval: float = JANITOR_SECONDS) -> None:
        self._janitor = asyncio.ensure_future(self._clean(meta, interval))

    async def _clean(self, meta: MetadataStore, interval: float) -> None:
        while True:
            try:
                dropped = await drop_finished_blocks(meta, self.store)
                if dropped:
                    log.info("WAL replica %s: dropped %d uploaded block(s)", self.replica_id, dropped)
            except Exception as exc:  # tried again next round
                log.warning("WAL replica janitor pass failed: %s", exc)
            await asyncio.sleep(interval)

    async def close(self) -> None:
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
        await self.server.close()
        await self.store.close()


__all__ = ["ClusterWalDirectory", "LocalWal", "default_durability", "replica_id", "wal_tls_contexts"]
