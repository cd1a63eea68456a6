"""The server SSLContext from Pulsar's tls* settings, and the client certificate's CN a connection exposes."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from nereus.tls import TlsConfigError, TlsOptions, peer_cert_cn


async def _cn_seen_by_server(options: TlsOptions, client: ssl.SSLContext) -> str | None:
    seen: asyncio.Future = asyncio.get_running_loop().create_future()

    class Capture(asyncio.Protocol):
        def connection_made(self, transport) -> None:
            if not seen.done():
                seen.set_result(peer_cert_cn(transport))

    server = await asyncio.get_running_loop().create_server(Capture, "127.0.0.1", 0, ssl=options.server_context())
    port = server.sockets[0].getsockname()[1]
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        result = await asyncio.wait_for(seen, 10)
        writer.close()
        return result
    finally:
        server.close()


def _client(pki, with_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if with_cert:
        context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    return context


def test_the_verified_client_certificate_cn_is_exposed(pki):
    options = TlsOptions(str(pki.server_cert), str(pki.server_key), str(pki.ca), require_client_cert=True)
    assert asyncio.run(_cn_seen_by_server(options, _client(pki, True))) == "client-role"


def test_without_a_trust_file_no_client_certificate_is_asked(pki):
    options = TlsOptions(str(pki.server_cert), str(pki.server_key))
    assert asyncio.run(_cn_seen_by_server(options, _client(pki, True))) is None


def test_incomplete_or_unreadable_settings_are_named(pki, tmp_path):
    with pytest.raises(TlsConfigError, match="tlsCertificateFilePath and tlsKeyFilePath"):
        TlsOptions(str(pki.server_cert)).server_context()
    with pytest.raises(TlsConfigError, match="needs tlsTrustCertsFilePath"):
        TlsOptions(str(pki.server_cert), str(pki.server_key), require_client_cert=True).server_context()
    with pytest.raises(TlsConfigError, match="cannot load the certificate"):
        TlsOptions(str(tmp_path / "missing.pem"), str(pki.server_key)).server_context()
    with pytest.raises(TlsConfigError, match="cannot load the certificate"):
        TlsOptions(str(pki.server_cert), str(pki.client_key)).server_context()  # not its key
