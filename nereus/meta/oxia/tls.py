"""TLS for the Oxia-protocol gRPC port and its clients (PEM files, as the broker's listeners).

Server: ``nereus oxia --tls-cert FILE --tls-key FILE [--tls-trust FILE]``; with a
trust file, clients must present a certificate it signed. Client: a metadata URL
``oxia+tls://host:port[/namespace][?trust=FILE&cert=FILE&key=FILE]`` (or
``oxia://...?tls=true&...``): ``trust`` is the CA that signed the server's
certificate (default: the system's roots), ``cert``/``key`` the client's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs

import grpc

from ..errors import InvalidRequest


@dataclass(frozen=True)
class OxiaTls:
    """PEM files of one side of a TLS gRPC connection."""

    cert_file: str | None = None
    key_file: str | None = None
    trust_file: str | None = None

    def _read(self, path: str | None, what: str) -> bytes | None:
        if not path:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as exc:
            raise InvalidRequest(f"cannot read the oxia TLS {what} {path}: {exc.strerror or exc}") from None

    def channel_credentials(self) -> grpc.ChannelCredentials:
        if bool(self.cert_file) != bool(self.key_file):
            raise InvalidRequest("an oxia TLS client certificate needs both cert= and key=")
        return grpc.ssl_channel_credentials(root_certificates=self._read(self.trust_file, "trust file"),
                                            private_key=self._read(self.key_file, "key"),
                                            certificate_chain=self._read(self.cert_file, "certificate"))

    def server_credentials(self) -> grpc.ServerCredentials:
        if not self.cert_file or not self.key_file:
            raise InvalidRequest("the oxia TLS listener needs --tls-cert and --tls-key")
        trust = self._read(self.trust_file, "trust file")
        return grpc.ssl_server_credentials([(self._read(self.key_file, "key"), self._read(self.cert_file,
                                                                                           "certificate"))],
                                           root_certificates=trust, require_client_auth=trust is not None)


def tls_of_url(scheme: str, query: str) -> OxiaTls | None:
    """The TLS settings of an ``oxia://`` / ``oxia+tls://`` URL's scheme and query (None: plaintext)."""
    params = {name: values[-1] for name, values in parse_qs(query).items()}
    unknown = set(params) - {"tls", "trust", "cert", "key"}
    if unknown:
        raise InvalidRequest(f"unknown oxia URL option(s): {', '.join(sorted(unknown))} (expected tls, trust, "
                             f"cert, key)")
    if scheme != "oxia+tls" and params.get("tls", "false").lower() != "true":
        if len(params) > ("tls" in params):
            raise InvalidRequest("trust=, cert= and key= need oxia+tls:// (or tls=true)")
        return None
    return OxiaTls(cert_file=params.get("cert"), key_file=params.get("key"), trust_file=params.get("trust"))


__all__ = ["OxiaTls", "tls_of_url"]
