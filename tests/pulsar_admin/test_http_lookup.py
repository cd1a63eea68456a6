"""A standalone serves Pulsar clients given its ``http://`` service URL (HTTP lookup and partitioned metadata)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pulsar

from .conftest import rest_path


def test_client_with_an_http_service_url_produces_and_consumes(standalone, make_client, admin, topic):
    client = make_client(standalone.http)
    partitioned = topic + "-p"
    admin.ok("PUT", rest_path(partitioned) + "/partitions", 2)
    for name in (topic, partitioned):
        consumer = client.subscribe(name, "sub")
        producer = client.create_producer(name)
        for i in range(6):
            producer.send(b"m%d" % i)
        got = sorted(consumer.receive(timeout_millis=15000).data() for _ in range(6))
        assert got == [b"m%d" % i for i in range(6)]
        producer.close()
        consumer.close()
    with urllib.request.urlopen(f"{standalone.http}/lookup/v2/topic{rest_path(topic)}", timeout=15) as response:
        data = json.loads(response.read())
    assert data["brokerUrl"] == data["nativeUrl"] == standalone.url
    assert data["httpUrl"] == standalone.http


def test_a_standalone_is_a_cluster_of_one(standalone, admin):
    assert admin.ok("GET", "/clusters") == ["standalone"]
    assert admin.ok("GET", "/brokers/standalone") == [f"127.0.0.1:{standalone.http_port}"]
    view = admin.ok("GET", "/nereus/cluster")
    assert [b["state"] for b in view["brokers"]] == ["active"]


def test_http_lookups_enforce_tenants_and_namespaces_as_the_binary_protocol(standalone, make_client, admin):
    missing = "persistent://no-such-tenant/no-such-ns/t"
    try:
        urllib.request.urlopen(f"{standalone.http}/lookup/v2/topic{rest_path(missing)}", timeout=15)
        raise AssertionError("a lookup on a missing namespace answered")
    except urllib.error.HTTPError as exc:
        assert exc.code == 404 and "does not exist" in json.loads(exc.read())["reason"]
    status, _ = admin.get(rest_path(missing) + "/partitions?checkAllowAutoCreation=true")
    assert status == 404
    client = make_client(standalone.http)
    try:
        client.create_producer(missing)
        raise AssertionError("a producer on a missing namespace was created")
    except pulsar.PulsarException:
        pass
    assert "no-such-tenant" not in admin.ok("GET", "/tenants")
