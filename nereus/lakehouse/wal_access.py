"""How the pipeline's processes read records acknowledged on WAL replicas and not uploaded yet.

Spark tasks, delivery and the compaction worker run no broker: they find the replicas from
the address records brokers keep in the metadata plane (``storage.wal_directory``) and read
from them, showing the credentials given here. A replica they cannot read (credentials
missing or refused, a TLS service without a client certificate, a broker down) is waited
out: the slice is read from the object store once it is uploaded, for up to ``upload_wait``
seconds.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..auth import AuthConfigError
from ..auth.broker_client import broker_token
from ..meta import MetadataStore
from ..objstore import ObjectStore
from ..storage.cache import BlockCache, TailCache
from ..storage.reader import StreamReader
from ..storage.wal_directory import RecordedWalDirectory
from ..storage.wal_locator import WalLocator
from ..tls import TlsConfigError, client_context

#: How long a read waits for a slice it cannot read from a WAL replica to reach the object store.
DEFAULT_UPLOAD_WAIT = 120.0


@dataclass(frozen=True, slots=True)
class WalAccess:
    """Credentials for WAL replicas (Pulsar's broker-client token forms) and the upload wait."""

    auth_params: str | None = None  # token:<jwt>, file:///path, {"token": ...} or the token itself
    tls_trust_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    upload_wait: float = DEFAULT_UPLOAD_WAIT

    def check(self) -> None:
        """Raise ValueError when the credentials cannot be used (TLS files not given together, a
        missing file, a bad token form); messages name the Spark source's options."""
        tls = (self.tls_cert_file, self.tls_key_file, self.tls_trust_file)
        if any(tls) and not all(tls):
            raise ValueError("reading WAL replicas over TLS needs walTlsCertFile, walTlsKeyFile and "
                             "walTlsTrustCertsFile together")
        self._token()
        self._ssl()

    def _token(self):
        try:
            return broker_token(None, self.auth_params)
        except AuthConfigError as exc:
            raise ValueError(str(exc).replace("brokerClientAuthenticationParameters", "walAuthParams")) from None

    def _ssl(self):
        if not self.tls_cert_file:
            return None
        try:
            return client_context(self.tls_cert_file, self.tls_key_file, self.tls_trust_file)
        except TlsConfigError as exc:
            raise ValueError(str(exc)) from None

    @asynccontextmanager
    async def reader(self, meta: MetadataStore, objects: ObjectStore, *, cache_bytes: int = 1):
        """A stream reader that reads WAL replicas with these credentials (closed on exit)."""
        directory = RecordedWalDirectory(meta, ssl=self._ssl(), token=self._token())
        try:
            yield StreamReader(meta, objects, TailCache(1), BlockCache(cache_bytes), WalLocator(meta, directory),
                               upload_wait=self.upload_wait)
        finally:
            await directory.close()


__all__ = ["DEFAULT_UPLOAD_WAIT", "WalAccess"]
