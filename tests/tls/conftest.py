"""Fixtures: a throwaway PKI and `nereus standalone` processes with TLS listeners."""

from __future__ import annotations

import pytest

from tests.standalone_process import Standalone, free_port

from .certs import make_pki

pytest.importorskip("cryptography")


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def other_pki(tmp_path_factory):
    """A second CA, which the servers do not trust (nor their clients it)."""
    return make_pki(tmp_path_factory.mktemp("other-pki"), "other")


def _start(directory, config: str, extra=()) -> Standalone:
    path = directory / "standalone.conf"
    path.write_text(config)
    server = Standalone(directory / "data", ["--compaction-interval", "0", "--config", str(path), *extra])
    server.start()
    return server


@pytest.fixture(scope="module")
def tls_standalone(tmp_path_factory, pki):
    """A standalone configured from a Pulsar-style file: TLS beside plaintext, client certificates optional."""
    directory = tmp_path_factory.mktemp("tls")
    ports = {"pulsar_tls": free_port(), "https": free_port(), "kafka_ssl": free_port()}
    server = _start(directory, f"""
# Pulsar's TLS keys
brokerServicePortTls={ports['pulsar_tls']}
webServicePortTls={ports['https']}
tlsCertificateFilePath={pki.server_cert}
tlsKeyFilePath={pki.server_key}
tlsTrustCertsFilePath={pki.ca}
tlsAllowInsecureConnection=false
tlsRequireTrustedClientCertOnConnect=false
kafkaListeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:{ports['kafka_ssl']}
""")
    server.tls_ports = ports
    yield server
    assert server.stop() == 0, server.log.read_text()[-3000:]


@pytest.fixture(scope="module")
def mtls_standalone(tmp_path_factory, pki):
    """A standalone requiring a trusted client certificate, serving one issued to another host name."""
    directory = tmp_path_factory.mktemp("mtls")
    ports = {"pulsar_tls": free_port(), "https": free_port(), "kafka_ssl": free_port()}
    server = _start(directory, f"""
tlsEnabled=true
brokerServicePortTls={ports['pulsar_tls']}
webServicePortTls={ports['https']}
tlsCertificateFilePath={pki.elsewhere_cert}
tlsKeyFilePath={pki.elsewhere_key}
tlsTrustCertsFilePath={pki.ca}
tlsRequireTrustedClientCertOnConnect=true
""", ["--kafka-ssl-port", str(ports["kafka_ssl"])])
    server.tls_ports = ports
    yield server
    assert server.stop() == 0, server.log.read_text()[-3000:]
