"""`nereus oxia` over TLS (client certificates required) and `nereus broker --metadata oxia+tls://...`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid

import pytest

from nereus.meta import MetadataUnavailable, connect
from tests.cli.processes import Server
from tests.ports import free_port

pulsar = pytest.importorskip("pulsar")


@pytest.fixture
def oxia_tls(tmp_path, pki):
    port = free_port()
    server = Server(["--log-level", "WARNING", "oxia", "--data-dir", str(tmp_path / "meta"), "--port", str(port),
                     "--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                     "--tls-trust", str(pki.ca)], tmp_path / "oxia.log")
    server.wait_port(port)
    yield port
    server.stop()


async def _put_get(url: str) -> bytes:
    meta = connect(url, retry_timeout=3)
    try:
        await meta.put("/tls-check", b"ok")
        return (await meta.get("/tls-check")).value
    finally:
        await meta.close()


def test_oxia_tls_client_needs_the_ca_and_a_certificate(oxia_tls, pki, other_pki):
    base = f"oxia+tls://127.0.0.1:{oxia_tls}?trust={pki.ca}"
    assert asyncio.run(_put_get(f"{base}&cert={pki.client_cert}&key={pki.client_key}")) == b"ok"
    with pytest.raises(MetadataUnavailable):  # no client certificate
        asyncio.run(_put_get(base))
    with pytest.raises(MetadataUnavailable):  # a server certificate of a CA it does not trust
        asyncio.run(_put_get(f"oxia+tls://127.0.0.1:{oxia_tls}?trust={other_pki.ca}&cert={pki.client_cert}"
                             f"&key={pki.client_key}"))
    with pytest.raises(MetadataUnavailable):  # plaintext to a TLS port
        asyncio.run(_put_get(f"oxia://127.0.0.1:{oxia_tls}"))


def test_broker_over_oxia_tls_produces_end_to_end(oxia_tls, pki, tmp_path):
    ports = {name: free_port() for name in ("http", "pulsar", "kafka")}
    # No trust= in the URL: the broker's tlsTrustCertsFilePath is used.
    metadata = f"oxia+tls://127.0.0.1:{oxia_tls}?cert={pki.client_cert}&key={pki.client_key}"
    broker = Server(["--log-level", "WARNING", "broker", "--metadata", metadata,
                     "--object-store", (tmp_path / "objects").as_uri(), "--compaction-interval", "0",
                     "--tls-trust-certs-file", str(pki.ca),
                     *[arg for name, port in ports.items() for arg in (f"--{name}-port", str(port))]],
                    tmp_path / "broker.log")
    try:
        broker.wait_port(ports["pulsar"])
        client = pulsar.Client(f"pulsar://127.0.0.1:{ports['pulsar']}", operation_timeout_seconds=20)
        try:
            topic = f"persistent://public/default/oxia-tls-{uuid.uuid4().hex[:6]}"
            consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
            client.create_producer(topic).send(b"metadata over tls")
            assert consumer.receive(20_000).data() == b"metadata over tls"
        finally:
            client.close()
    finally:
        broker.stop()


def test_oxia_url_options_are_checked():
    from nereus.meta import InvalidRequest

    with pytest.raises(InvalidRequest, match="unknown oxia URL option"):
        connect("oxia+tls://127.0.0.1:1?trusted=/ca.pem")
    with pytest.raises(InvalidRequest, match="need oxia\\+tls"):
        connect("oxia://127.0.0.1:1?trust=/ca.pem")


def _kafka_user(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nereus.cli", "kafka-user", *args], capture_output=True, text=True,
                          timeout=60)


def test_kafka_user_reaches_a_tls_only_metadata_service(oxia_tls, pki):
    metadata = f"oxia://127.0.0.1:{oxia_tls}"
    tls = ["--tls-trust-certs-file", str(pki.ca), "--tls-cert-file", str(pki.client_cert),
           "--tls-key-file", str(pki.client_key)]
    done = _kafka_user("set", "alice", "--password", "secret", "--metadata", metadata, *tls)
    assert done.returncode == 0, done.stderr
    listed = _kafka_user("list", "--metadata", metadata, *tls)
    assert listed.returncode == 0 and listed.stdout.startswith("alice\t"), listed.stderr
    refused = _kafka_user("list", "--metadata", metadata, "--tls-cert-file", str(pki.client_cert))
    assert refused.returncode == 2 and "go together" in refused.stderr
