"""TLS for every listener: the server's ``ssl.SSLContext`` and the peer certificate's CN.

Read from Pulsar's keys (PEM files, no keystores): ``tlsCertificateFilePath`` and
``tlsKeyFilePath`` are the server's certificate chain and private key,
``tlsTrustCertsFilePath`` the CA certificates client certificates are verified
against. With a trust file the server asks for a client certificate:
``tlsRequireTrustedClientCertOnConnect=true`` refuses a client without a trusted
one; otherwise a client may present none (a presented but untrusted one is still
refused). ``tlsAllowInsecureConnection=true`` asks for no client certificate at all.
The same files serve the Pulsar, Kafka (SSL), HTTPS and Oxia listeners.
A verified client certificate's CN is the connection's role: Pulsar's TLS provider, and the
principal of a Kafka SSL listener's client (without SASL), which its ACLs check.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass


class TlsConfigError(ValueError):
    """The TLS settings are incomplete or their files cannot be used."""


@dataclass(frozen=True)
class TlsOptions:
    """The server side of TLS (Pulsar's ``tls*`` keys)."""

    cert_file: str | None = None
    key_file: str | None = None
    trust_file: str | None = None
    allow_insecure: bool = False  # tlsAllowInsecureConnection: client certificates are not asked for
    require_client_cert: bool = False  # tlsRequireTrustedClientCertOnConnect

    def server_context(self) -> ssl.SSLContext:
        """A server context; raises ``TlsConfigError`` naming the setting that is missing or unusable."""
        if not self.cert_file or not self.key_file:
            raise TlsConfigError("a TLS listener needs tlsCertificateFilePath and tlsKeyFilePath "
                                 "(--tls-cert-file, --tls-key-file)")
        if self.require_client_cert and not self.trust_file:
            raise TlsConfigError("tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath "
                                 "(--tls-trust-certs-file)")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cannot load the certificate {self.cert_file} with the key {self.key_file}: "
                                 f"{_reason(exc)}") from None
        if self.trust_file and not self.allow_insecure:
            try:
                context.load_verify_locations(cafile=self.trust_file)
            except (OSError, ssl.SSLError) as exc:
                raise TlsConfigError(f"cannot load the trusted certificates {self.trust_file}: "
                                     f"{_reason(exc)}") from None
            context.verify_mode = ssl.CERT_REQUIRED if self.require_client_cert else ssl.CERT_OPTIONAL
        return context


def client_context(cert_file: str, key_file: str, trust_file: str) -> ssl.SSLContext:
    """A client context that shows ``cert_file`` and trusts the CAs of ``trust_file`` (chains are verified;
    host names are not, as Pulsar's broker clients by default: brokers register by address). Raises
    ``TlsConfigError``."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    try:
        context.load_verify_locations(cafile=trust_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the trusted certificates {trust_file}: {_reason(exc)}") from None
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"cannot load the certificate {cert_file} with the key {key_file}: "
                             f"{_reason(exc)}") from None
    return context


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


#: The ``get_extra_info`` key of a connection whose TLS an offload worker terminated
#: (nereus.tls_offload): its PROXY header, with the client's address and certificate CN.
OFFLOADED = "tls_offload_header"


def peer_cert_cn(transport) -> str | None:
    """The common name of the verified client certificate of a TLS ``transport`` (None: none, or no TLS).

    Knows both kinds of TLS connection: TLS ended in this process (the certificate of
    the transport's SSL object), and TLS ended by an offload worker (the CN its PROXY
    header passed on).
    """
    if transport is None:
        return None
    offloaded = transport.get_extra_info(OFFLOADED)
    if offloaded is not None:
        return offloaded.ssl_cn
    return certificate_cn(transport.get_extra_info("peercert"))


def certificate_cn(cert: dict | None) -> str | None:
    """The CN of the subject of a verified certificate, as ``SSLObject.getpeercert()`` gives it."""
    for rdn in (cert or {}).get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return value
    return None


__all__ = ["OFFLOADED", "TlsConfigError", "TlsOptions", "certificate_cn", "client_context", "peer_cert_cn"]
