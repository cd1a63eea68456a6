"""Pulsar's TLS keys and KoP's SSL listener in a --config file."""

from __future__ import annotations

import pytest

from nereus.broker.config_file import STANDALONE, ConfigError, parse_properties, resolve


def values(text: str) -> dict:
    return resolve(parse_properties(text), STANDALONE).values


def test_pulsar_tls_keys_map_to_the_options():
    got = values("brokerServicePortTls=6651\nwebServicePortTls=8443\ntlsCertificateFilePath=/c.pem\n"
                 "tlsKeyFilePath=/k.pem\ntlsTrustCertsFilePath=/ca.pem\ntlsAllowInsecureConnection=false\n"
                 "tlsRequireTrustedClientCertOnConnect=true\n")
    assert got == {"pulsar_tls_port": 6651, "https_port": 8443, "tls_cert_file": "/c.pem", "tls_key_file": "/k.pem",
                   "tls_trust_certs_file": "/ca.pem", "tls_allow_insecure": False, "tls_require_client_cert": True}


def test_legacy_tls_enabled_opens_pulsars_usual_ports_unless_given():
    assert values("tlsEnabled=true\n") == {"pulsar_tls_port": 6651, "https_port": 8443}
    assert values("tlsEnabled=true\nbrokerServicePortTls=7651\n") == {"pulsar_tls_port": 7651, "https_port": 8443}
    assert values("tlsEnabled=false\n") == {}


def test_kop_ssl_listener_beside_plaintext():
    assert values("kafkaListeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093\n") == {
        "kafka_port": 9092, "kafka_ssl_port": 9093, "bind": "127.0.0.1"}


def test_kop_listeners_without_plaintext():
    assert values("kafkaListeners=SASL_SSL://:9094,SSL://:9093\n") == {
        "kafka_plaintext": False, "kafka_sasl_ssl_port": 9094, "kafka_ssl_port": 9093}


@pytest.mark.parametrize(("text", "reason"), [
    ("kafkaListeners=PLAINTEXT://:9092,SSL://:9093,SSL://:9094", "more than one SSL listener"),
    ("kafkaListeners=PLAINTEXT://:9092,QUIC://:9093", "unknown security protocol"),
    (" kafkaListeners= , ", "expected PROTOCOL://host:port listeners"),
])
def test_kafka_listeners_that_cannot_be_served_are_refused(text, reason):
    with pytest.raises(ConfigError, match=reason):
        values(text + "\n")
