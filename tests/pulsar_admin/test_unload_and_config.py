"""Unload (clients are told to reconnect and keep working), clusters, broker configuration."""

from __future__ import annotations

from tests.pulsar_broker.rawclient import RawClient

from .conftest import rest_path, wait_until


def test_unload_closes_producers_and_the_official_client_keeps_sending(standalone, admin, client, topic, pulsar):
    raw = RawClient(standalone.pulsar_port)
    raw.connect()
    raw.producer(topic, name="raw")
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    sent = [b"before-%d" % i for i in range(5)]
    for payload in sent:
        producer.send(payload)

    assert admin.put(rest_path(topic) + "/unload")[0] == 204
    # The broker tells its producers to reconnect (Pulsar's CLOSE_PRODUCER).
    assert raw.expect("CLOSE_PRODUCER").producer_id == 1
    raw.close()
    # The official client reconnects by itself and keeps sending; its consumer keeps receiving.
    after = [b"after-%d" % i for i in range(5)]
    for payload in after:
        producer.send(payload)
    got = [consumer.receive(timeout_millis=15000) for _ in range(10)]
    assert sorted(m.data() for m in got) == sorted(sent + after)
    assert admin.ok("GET", rest_path(topic) + "/stats")["msgInCounter"] >= 5


def test_unload_of_a_partitioned_topic_and_errors(standalone, admin, client, topic):
    admin.ok("PUT", rest_path(topic) + "/partitions", 2)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"a", partition_key="x")
    assert admin.put(rest_path(topic) + "/unload")[0] == 204
    producer.send(b"b", partition_key="x")
    assert admin.put("/persistent/public/default/no-such-topic/unload") == (404, {"reason": "Topic not found"})


def test_clusters(standalone, admin):
    assert admin.ok("GET", "/clusters") == ["standalone"]
    cluster = admin.ok("GET", "/clusters/standalone")
    assert cluster["serviceUrl"] == standalone.http and cluster["brokerServiceUrl"] == standalone.url
    assert admin.get("/clusters/elsewhere")[0] == 404


def test_broker_configuration(standalone, admin):
    assert admin.ok("GET", "/brokers/configuration") == []  # nothing can be changed while running
    assert admin.ok("GET", "/brokers/configuration/values") == {}
    runtime = admin.ok("GET", "/brokers/configuration/runtime")
    assert all(isinstance(v, str) for v in runtime.values())
    assert runtime["webServicePort"] == str(standalone.http_port)
    assert runtime["brokerServicePort"] == str(standalone.pulsar_port)
    assert runtime["clusterName"] == "standalone"
    assert runtime["kafkaListeners"] == f"PLAINTEXT://127.0.0.1:{standalone.ports['kafka']}"
    assert runtime["allowAutoTopicCreation"] == "true" and runtime["defaultNumPartitions"] == "1"
    assert runtime["authenticationEnabled"] == "false" and runtime["tlsCertificateFilePath"] == ""
    assert not any(value.startswith(("AuthSettings(", "TlsOptions(", "(")) for value in runtime.values())
    assert admin.ok("GET", "/brokers") == [f"127.0.0.1:{standalone.http_port}"]


def test_unload_of_a_namespace_and_of_its_bundle(standalone, admin, client, pulsar):
    ns = "public/unload-ns"
    admin.ok("PUT", f"/namespaces/{ns}")
    raw = RawClient(standalone.pulsar_port)
    raw.connect()
    raw.producer(f"persistent://{ns}/a", name="raw")
    producer = client.create_producer(f"persistent://{ns}/b", batching_enabled=False)
    consumer = client.subscribe(f"persistent://{ns}/b", "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer.send(b"before")
    assert admin.put(f"/namespaces/{ns}/unload")[0] == 204
    assert raw.expect("CLOSE_PRODUCER").producer_id == 1  # each topic of the namespace was unloaded
    raw.close()
    producer.send(b"after")  # the official client reconnects by itself
    got = [consumer.receive(timeout_millis=15000) for _ in range(2)]
    assert sorted(m.data() for m in got) == [b"after", b"before"]
    for message in got:
        consumer.acknowledge(message)
    wait_until(lambda: admin.ok("GET", f"/persistent/{ns}/b/stats")["subscriptions"]["sub"]["msgBacklog"] == 0)
    assert admin.put(f"/namespaces/{ns}/0x00000000_0xffffffff/unload")[0] == 204  # pulsar-admin's bundle form
    producer.send(b"again")
    assert consumer.receive(timeout_millis=15000).data() == b"again"
    assert admin.put("/namespaces/public/no-such-ns/unload")[0] == 404
