"""Advertised listeners: a client's ``listener_name`` picks the URL lookups answer (binary and HTTP)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from nereus.codec.pulsar import pb, wrap
from tests.cutting_proxy import CuttingProxy
from tests.pulsar_broker.rawclient import RawClient
from tests.standalone_process import Standalone, free_port


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A standalone with three listeners: internal (its port), external (through a NAT-like proxy), direct (bound)."""
    server = Standalone(tmp_path_factory.mktemp("listeners") / "data")
    proxy = CuttingProxy("127.0.0.1", server.pulsar_port)
    direct = free_port()
    server.extra_args = [
        "--compaction-interval", "0",
        "--advertised-listeners", f"internal:pulsar://127.0.0.1:{server.pulsar_port},"
                                  f"external:pulsar://127.0.0.1:{proxy.port},direct:pulsar://localhost:{direct}",
        "--bind-addresses", f"direct:pulsar://127.0.0.1:{direct}"]
    server.start()
    yield server, proxy, direct
    proxy.close()
    assert server.stop() == 0, server.log.read_text()[-3000:]


def _lookup(port: int, topic: str, listener: str | None = None) -> pb.CommandLookupTopicResponse:
    raw = RawClient(port)
    try:
        raw.connect()
        cmd = pb.CommandLookupTopic(request_id=1, topic=topic)
        if listener is not None:
            cmd.advertised_listener_name = listener
        raw.send(wrap(cmd))
        return raw.expect("LOOKUP_RESPONSE")
    finally:
        raw.close()


def _http_lookup(server, topic: str, listener: str | None = None):
    url = f"{server.http}/lookup/v2/topic/{topic.replace('://', '/', 1)}"
    if listener is not None:
        url += f"?listenerName={listener}"
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_lookups_answer_the_named_listener(setup, topic):
    server, proxy, direct = setup
    internal, external = f"pulsar://127.0.0.1:{server.pulsar_port}", f"pulsar://127.0.0.1:{proxy.port}"
    assert _lookup(server.pulsar_port, topic).brokerServiceUrl == internal
    assert _lookup(server.pulsar_port, topic, "").brokerServiceUrl == internal  # an empty name is none
    assert _lookup(server.pulsar_port, topic, "external").brokerServiceUrl == external
    assert _lookup(server.pulsar_port, topic, "internal").brokerServiceUrl == internal
    # Connected to a bind address and naming no listener: that bind address's listener.
    assert _lookup(direct, topic).brokerServiceUrl == f"pulsar://localhost:{direct}"
    assert _lookup(direct, topic, "internal").brokerServiceUrl == internal
    unknown = _lookup(server.pulsar_port, topic, "nope")
    assert unknown.response == pb.CommandLookupTopicResponse.Failed
    assert "nope" in unknown.message

    assert _http_lookup(server, topic)[1]["brokerUrl"] == internal
    status, data = _http_lookup(server, topic, "external")
    assert status == 200 and data["brokerUrl"] == data["nativeUrl"] == external
    assert data["httpUrl"] == server.http
    status, data = _http_lookup(server, topic, "nope")
    assert status == 500 and "nope" in data["reason"]


def test_official_client_follows_its_listener(setup, make_client, pulsar, topic):
    server, proxy, direct = setup
    before = len(proxy._pairs)
    # The external listener's address is the proxy's: the client must go through it.
    for service_url in (server.url, server.http):
        client = make_client(service_url, listener_name="external")
        producer = client.create_producer(topic + service_url[:4])
        consumer = client.subscribe(topic + service_url[:4], "s")
        producer.send(b"via external")
        assert consumer.receive(timeout_millis=10000).data() == b"via external"
        client.close()
    assert len(proxy._pairs) > before

    plain = make_client(server.url)
    plain.create_producer(topic + "-plain").send(b"direct")
    plain.close()
    unchanged = len(proxy._pairs)
    internal = make_client(server.url, listener_name="internal")
    internal.create_producer(topic + "-internal").send(b"internal")
    assert len(proxy._pairs) == unchanged

    lost = make_client(server.url, listener_name="nope", operation_timeout_seconds=5)
    with pytest.raises(pulsar.PulsarException):
        lost.create_producer(topic + "-nope")
