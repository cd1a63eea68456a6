"""TLS beside every plaintext listener: official Pulsar and Kafka clients, HTTPS admin, client certificates."""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
import uuid

import pytest

pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")

FAST = {"operation_timeout_seconds": 5, "connection_timeout_ms": 3000}


def _topic() -> str:
    return f"persistent://public/default/tls-{uuid.uuid4().hex[:8]}"


def _round_trip(client, topic: str, payload: bytes) -> bytes:
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    client.create_producer(topic).send(payload)
    return consumer.receive(10_000).data()


def test_pulsar_client_over_tls_with_hostname_validation(tls_standalone, pki):
    port = tls_standalone.tls_ports["pulsar_tls"]
    client = pulsar.Client(f"pulsar+ssl://localhost:{port}", tls_trust_certs_file_path=str(pki.ca),
                           tls_validate_hostname=True, **FAST)
    try:
        assert _round_trip(client, _topic(), b"over tls") == b"over tls"
    finally:
        client.close()


def test_plaintext_listener_keeps_serving_beside_tls(tls_standalone):
    client = pulsar.Client(tls_standalone.url, **FAST)
    try:
        assert _round_trip(client, _topic(), b"plain") == b"plain"
    finally:
        client.close()


def test_an_untrusted_server_certificate_is_refused(tls_standalone, other_pki):
    port = tls_standalone.tls_ports["pulsar_tls"]
    client = pulsar.Client(f"pulsar+ssl://localhost:{port}", tls_trust_certs_file_path=str(other_pki.ca), **FAST)
    topic = _topic()
    try:
        with pytest.raises((pulsar.Timeout, pulsar.ConnectError)):
            client.create_producer(topic)
    finally:
        client.close()
    with urllib.request.urlopen(f"{tls_standalone.http}/admin/v2/persistent/public/default", timeout=10) as r:
        assert topic not in json.load(r)  # nothing was created


def test_https_admin_and_lookup_answer_the_tls_urls(tls_standalone, pki):
    https = f"https://localhost:{tls_standalone.tls_ports['https']}"
    context = ssl.create_default_context(cafile=str(pki.ca))
    with urllib.request.urlopen(f"{https}/admin/v2/clusters/standalone", context=context, timeout=10) as r:
        cluster = json.load(r)
    assert cluster["brokerServiceUrlTls"] == f"pulsar+ssl://127.0.0.1:{tls_standalone.tls_ports['pulsar_tls']}"
    assert cluster["serviceUrlTls"] == f"https://127.0.0.1:{tls_standalone.tls_ports['https']}"
    with urllib.request.urlopen(f"{https}/lookup/v2/topic/persistent/public/default/looked-up", context=context,
                                timeout=10) as r:
        lookup = json.load(r)
    assert lookup["brokerUrlTls"] == cluster["brokerServiceUrlTls"]
    assert lookup["httpUrlTls"] == cluster["serviceUrlTls"]
    assert lookup["brokerUrl"] == tls_standalone.url
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"{https}/admin/v2/clusters", context=ssl.create_default_context(), timeout=10)


def test_pulsar_client_over_https_service_url(tls_standalone, pki):
    client = pulsar.Client(f"https://localhost:{tls_standalone.tls_ports['https']}",
                           tls_trust_certs_file_path=str(pki.ca), **FAST)
    try:
        assert _round_trip(client, _topic(), b"http lookup") == b"http lookup"
    finally:
        client.close()


def _kafka(port: int, **config) -> dict:
    return {"bootstrap.servers": f"localhost:{port}", "security.protocol": "SSL", "socket.timeout.ms": 5000,
            "message.timeout.ms": 8000, "log_level": 0, **config}


def _delivery_errors(config: dict, topic: str) -> list:
    """The errors of producing one message (empty: delivered)."""
    errors, delivered = [], []
    producer = confluent_kafka.Producer(config)
    producer.produce(topic, b"message", on_delivery=lambda err, msg: (errors if err else delivered).append(err))
    producer.flush(20)
    assert errors or delivered, "no delivery report"
    return errors


def _consume_one(config: dict, topic: str, deadline_seconds: float = 20):
    consumer = confluent_kafka.Consumer({**config, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + deadline_seconds
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                return message.value()
        return None
    finally:
        consumer.close()


def test_confluent_kafka_over_ssl(tls_standalone, pki):
    port = tls_standalone.tls_ports["kafka_ssl"]
    config = _kafka(port, **{"ssl.ca.location": str(pki.ca)})
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer(config)
    producer.produce(topic, b"kafka over ssl")
    assert producer.flush(15) == 0
    # Metadata over the SSL listener names the SSL port, so the client stays on TLS.
    brokers = producer.list_topics(timeout=10).brokers
    assert {b.port for b in brokers.values()} == {port}
    assert _consume_one(config, topic) == b"kafka over ssl"
    plain = confluent_kafka.Producer({"bootstrap.servers": tls_standalone.bootstrap})
    assert {b.port for b in plain.list_topics(timeout=10).brokers.values()} == {int(tls_standalone.ports["kafka"])}


def test_kafka_ssl_refuses_an_untrusted_server_certificate(tls_standalone, other_pki):
    config = _kafka(tls_standalone.tls_ports["kafka_ssl"], **{"ssl.ca.location": str(other_pki.ca)})
    assert _delivery_errors(config, f"tls-{uuid.uuid4().hex[:8]}")


# -- client certificates (tlsRequireTrustedClientCertOnConnect) ---------------------------------------

def test_mtls_pulsar_client_with_a_certificate_is_served(mtls_standalone, pki):
    # The server's certificate names broker.example.com: only a client not validating host names accepts it.
    client = pulsar.Client(f"pulsar+ssl://127.0.0.1:{mtls_standalone.tls_ports['pulsar_tls']}",
                           tls_trust_certs_file_path=str(pki.ca), tls_validate_hostname=False,
                           authentication=pulsar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key)),
                           **FAST)
    try:
        assert _round_trip(client, _topic(), b"mtls") == b"mtls"
    finally:
        client.close()


def test_mtls_hostname_validation_refuses_a_certificate_of_another_host(mtls_standalone, pki):
    client = pulsar.Client(f"pulsar+ssl://127.0.0.1:{mtls_standalone.tls_ports['pulsar_tls']}",
                           tls_trust_certs_file_path=str(pki.ca), tls_validate_hostname=True,
                           authentication=pulsar.AuthenticationTLS(str(pki.client_cert), str(pki.client_key)),
                           **FAST)
    try:
        with pytest.raises((pulsar.Timeout, pulsar.ConnectError)):
            client.create_producer(_topic())
    finally:
        client.close()


def test_mtls_a_client_without_a_certificate_is_refused(mtls_standalone, pki):
    client = pulsar.Client(f"pulsar+ssl://127.0.0.1:{mtls_standalone.tls_ports['pulsar_tls']}",
                           tls_trust_certs_file_path=str(pki.ca), tls_validate_hostname=False, **FAST)
    try:
        with pytest.raises((pulsar.Timeout, pulsar.ConnectError)):
            client.create_producer(_topic())
    finally:
        client.close()
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.check_hostname = False
    https = f"https://127.0.0.1:{mtls_standalone.tls_ports['https']}/admin/v2/clusters"
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        urllib.request.urlopen(https, context=context, timeout=10).read()
    context.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    with urllib.request.urlopen(https, context=context, timeout=10) as r:
        assert json.load(r) == ["standalone"]


def test_mtls_kafka_needs_a_client_certificate(mtls_standalone, pki):
    port = mtls_standalone.tls_ports["kafka_ssl"]
    base = {"ssl.ca.location": str(pki.ca), "ssl.endpoint.identification.algorithm": "none"}
    assert _delivery_errors(_kafka(port, **base), "mtls-refused")
    config = _kafka(port, **base, **{"ssl.certificate.location": str(pki.client_cert),
                                     "ssl.key.location": str(pki.client_key)})
    assert _delivery_errors(config, "mtls-kafka") == []


def _metric(node, listener: str) -> float:
    for line in node.metrics().splitlines():
        if line.startswith(f'nereus_tls_handshakes_on_plaintext_total{{listener="{listener}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_tls_client_on_the_plaintext_pulsar_port_is_told_where_to_go(tls_standalone, pki):
    """Closed at its ClientHello, counted, one log line naming the TLS port: no oversized-frame noise."""
    for _ in range(2):
        client = pulsar.Client(f"pulsar+ssl://localhost:{tls_standalone.pulsar_port}",
                               tls_trust_certs_file_path=str(pki.ca), operation_timeout_seconds=2,
                               connection_timeout_ms=2000)
        try:
            with pytest.raises((pulsar.ConnectError, pulsar.Timeout)):
                client.create_producer(_topic())
        finally:
            client.close()
    assert _metric(tls_standalone, "pulsar") >= 2
    log = tls_standalone.log.read_text()
    lines = [line for line in log.splitlines() if "TLS handshake on the plaintext pulsar listener" in line]
    assert len(lines) == 1, lines  # once a minute, however often the client retries
    assert f"use port {tls_standalone.tls_ports['pulsar_tls']} (pulsar+ssl://)" in lines[0]
    assert "FrameTooLarge" not in log and "exceeds the limit" not in log


def test_an_ssl_kafka_client_on_the_plaintext_port_is_told_where_to_go(tls_standalone, pki):
    producer = confluent_kafka.Producer({"bootstrap.servers": tls_standalone.bootstrap, "security.protocol": "SSL",
                                         "ssl.ca.location": str(pki.ca), "reconnect.backoff.ms": 50,
                                         "reconnect.backoff.max.ms": 100})
    try:
        producer.produce("tls-on-plaintext", b"x")
        _wait_for(lambda: producer.poll(0.2) is not None and _metric(tls_standalone, "kafka PLAINTEXT") >= 3,
                  "the client's retries were not counted")
    finally:
        producer.purge()
    log = tls_standalone.log.read_text()
    lines = [line for line in log.splitlines() if "TLS handshake on the plaintext kafka PLAINTEXT listener" in line]
    assert len(lines) == 1, lines
    assert f"use port {tls_standalone.tls_ports['kafka_ssl']} (SSL)" in lines[0]
    assert "kafka: closing connection" not in log  # no 'frame of 369295... bytes' line per retry
