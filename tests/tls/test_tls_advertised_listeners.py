"""An advertised listener with a pulsar+ssl:// URL: lookups (binary and HTTP) of a client naming it answer that
URL as brokerServiceUrlTls, and the official client reaches the broker by it over TLS."""

from __future__ import annotations

import json
import urllib.request
import uuid

import pytest

from tests.standalone_process import Standalone, free_port

pulsar = pytest.importorskip("pulsar")


@pytest.fixture(scope="module")
def advertised_tls(tmp_path_factory, pki):
    directory = tmp_path_factory.mktemp("tls-listeners")
    server = Standalone(directory / "data")
    tls_port = free_port()
    config = directory / "standalone.conf"
    # localhost, not the 127.0.0.1 the broker's own URLs name: the answers show which one was taken
    config.write_text(f"brokerServicePortTls={tls_port}\ntlsCertificateFilePath={pki.server_cert}\n"
                      f"tlsKeyFilePath={pki.server_key}\ntlsTrustCertsFilePath={pki.ca}\n"
                      f"advertisedListeners=internal:pulsar://127.0.0.1:{server.pulsar_port},"
                      f"external:pulsar+ssl://localhost:{tls_port}\n")
    server.extra_args = ["--compaction-interval", "0", "--config", str(config)]
    server.start()
    yield server, tls_port
    assert server.stop() == 0, server.log.read_text()[-3000:]


def _http_lookup(server, topic: str, listener: str) -> dict:
    url = f"{server.http}/lookup/v2/topic/persistent/public/default/{topic}?listenerName={listener}"
    with urllib.request.urlopen(url, timeout=15) as response:
        return json.load(response)


def test_a_tls_listener_is_answered_and_reached(advertised_tls, pki):
    server, tls_port = advertised_tls
    topic = f"adv-tls-{uuid.uuid4().hex[:6]}"
    looked_up = _http_lookup(server, topic, "external")
    assert looked_up["brokerUrlTls"] == f"pulsar+ssl://localhost:{tls_port}"
    assert looked_up["brokerUrl"] == ""
    assert _http_lookup(server, topic, "internal")["brokerUrl"] == f"pulsar://127.0.0.1:{server.pulsar_port}"

    client = pulsar.Client(f"pulsar+ssl://localhost:{tls_port}", tls_trust_certs_file_path=str(pki.ca),
                           tls_validate_hostname=True, listener_name="external", operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(f"persistent://public/default/{topic}", "s",
                                    initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(f"persistent://public/default/{topic}").send(b"by the tls listener")
        assert consumer.receive(10_000).data() == b"by the tls listener"
    finally:
        client.close()
