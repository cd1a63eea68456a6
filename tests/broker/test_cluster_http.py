"""The HTTP side of a cluster: Pulsar's HTTP lookup, cluster and broker admin, drain, owner redirects, leases."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest
import requests

from nereus.broker.cluster import ACTIVE, DRAINING
from nereus.broker.cluster.ownership import owner_key

from .cluster_harness import Cluster, rest

TIMEOUT = 30


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(3).start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def pulsar():
    module = pytest.importorskip("pulsar")
    if not hasattr(module, "Client"):
        pytest.skip("'import pulsar' did not find pulsar-client")
    return module


@pytest.fixture
def make_client(pulsar):
    clients = []

    def make(url: str):
        client = pulsar.Client(url, operation_timeout_seconds=20, connection_timeout_ms=3000, io_threads=1,
                               message_listener_threads=1,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def owner_name(cluster: Cluster, topic: str) -> str | None:
    rec = cluster.run(cluster.nodes[0].storage.meta.get(owner_key(topic)))
    return json.loads(rec.value)["broker"] if rec is not None else None


def test_http_lookup_of_a_topic_of_another_broker_gives_that_brokers_urls(cluster):
    topic = cluster.topic_for(1)
    b = cluster.nodes[1].address
    url = f"{cluster.http(0)}/lookup/v2/topic/{rest(topic)}"
    # Nobody owns it yet: broker 0 sends the client to broker 1, which is to take it.
    first = requests.get(url, allow_redirects=False, timeout=TIMEOUT)
    assert first.status_code == 307
    assert first.headers["Location"].startswith(f"{b.http_url}/lookup/v2/topic/{rest(topic)}")
    assert "authoritative=true" in first.headers["Location"]
    data = requests.get(url, timeout=TIMEOUT).json()
    assert data["brokerUrl"] == data["nativeUrl"] == b.pulsar_url
    assert data["httpUrl"] == b.http_url and "brokerUrlTls" in data
    assert owner_name(cluster, topic) == b.name
    # Owned now: any broker answers with the owner at once.
    again = requests.get(f"{cluster.http(2)}/lookup/v2/topic/{rest(topic)}", allow_redirects=False, timeout=TIMEOUT)
    assert again.status_code == 200 and again.json()["brokerUrl"] == b.pulsar_url
    bad = requests.get(f"{cluster.http(0)}/lookup/v2/topic/persistent/public/default/a%2Fb%3F", timeout=TIMEOUT)
    assert bad.status_code in (200, 307, 412)


def test_pulsar_client_with_an_http_service_url_produces_and_consumes(cluster, make_client):
    client = make_client(cluster.http(0))
    topics = [cluster.topic_for(i, "http") for i in range(3)]
    partitioned = f"persistent://public/default/http-part-{uuid.uuid4().hex[:8]}"
    r = requests.put(f"{cluster.http(2)}/admin/v2/{rest(partitioned)}/partitions", json=3, timeout=TIMEOUT)
    assert r.status_code == 204
    for topic in [*topics, partitioned]:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"{topic}-{i}".encode())
        got = sorted(consumer.receive(timeout_millis=TIMEOUT * 1000).data().decode() for _ in range(10))
        assert got == sorted(f"{topic}-{i}" for i in range(10))
        producer.close()
        consumer.close()
    # Each non-partitioned topic is served by the broker the ring gives it.
    assert [owner_name(cluster, t) for t in topics] == [n.membership.name for n in cluster.nodes]


def test_clusters_and_brokers_are_listed(cluster):
    base = cluster.http(1)
    assert requests.get(f"{base}/admin/v2/clusters", timeout=TIMEOUT).json() == ["standalone"]
    data = requests.get(f"{base}/admin/v2/clusters/standalone", timeout=TIMEOUT).json()
    assert data["serviceUrl"] == cluster.http(1)
    assert data["brokerServiceUrl"] == cluster.nodes[1].address.pulsar_url
    assert requests.get(f"{base}/admin/v2/clusters/elsewhere", timeout=TIMEOUT).status_code == 404
    brokers = requests.get(f"{base}/admin/v2/brokers/standalone", timeout=TIMEOUT).json()
    assert brokers == sorted(n.address.http_url.removeprefix("http://") for n in cluster.nodes)
    assert requests.get(f"{base}/admin/v2/brokers/health", timeout=TIMEOUT).text == "ok"
    view = requests.get(f"{base}/admin/v2/nereus/cluster", timeout=TIMEOUT).json()
    assert view["cluster"] == "standalone" and view["broker"] == "b1"
    assert [b["name"] for b in view["brokers"]] == ["b0", "b1", "b2"]
    assert {b["state"] for b in view["brokers"]} == {ACTIVE}
    assert all(b["pulsarUrl"].startswith("pulsar://") and b["kafkaAddress"] for b in view["brokers"])
    cluster.wait_until(lambda: "gc" in requests.get(f"{base}/admin/v2/nereus/cluster", timeout=TIMEOUT)
                       .json()["leases"])
    leader = requests.get(f"{base}/admin/v2/brokers/leaderBroker", timeout=TIMEOUT).json()
    holder = requests.get(f"{base}/admin/v2/nereus/cluster", timeout=TIMEOUT).json()["leases"]["gc"]
    assert leader["serviceUrl"] == cluster.node(holder).address.http_url


def test_retention_runs_on_one_broker_only(cluster):
    def holders():
        return [n.membership.name for n in cluster.nodes if n.leases.get("retention")]

    assert len(cluster.wait_until(holders)) == 1
    [holder] = holders()
    assert all(n.leases.get("retention") in (None, holder) for n in cluster.nodes)
    view = requests.get(f"{cluster.http(0)}/admin/v2/nereus/cluster", timeout=TIMEOUT).json()
    assert view["leases"]["retention"] == holder


def test_topic_calls_at_a_non_owner_are_redirected_to_the_owner(cluster, make_client):
    topic = cluster.topic_for(2, "stats")
    client = make_client(cluster.nodes[0].address.pulsar_url)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "s1")
    for i in range(5):
        producer.send(b"x%d" % i)
    assert owner_name(cluster, topic) == "b2"
    owner = cluster.nodes[2].address.http_url
    path = f"/admin/v2/{rest(topic)}/stats?getPreciseBacklog=true"
    r = requests.get(cluster.http(0) + path, allow_redirects=False, timeout=TIMEOUT)
    assert r.status_code == 307
    assert r.headers["Location"].startswith(owner + f"/admin/v2/{rest(topic)}/stats?")
    assert "getPreciseBacklog=true" in r.headers["Location"]
    stats = requests.get(cluster.http(0) + path, timeout=TIMEOUT).json()
    assert len(stats["publishers"]) == 1 and stats["subscriptions"]["s1"]["msgBacklog"] == 5
    # State-changing calls follow the same way (a 307 keeps the method).
    r = requests.post(f"{cluster.http(1)}/admin/v2/{rest(topic)}/subscription/s1/skip_all", timeout=TIMEOUT)
    assert r.status_code == 204
    stats = requests.get(f"{cluster.http(1)}/admin/v2/{rest(topic)}/stats", timeout=TIMEOUT).json()
    assert stats["subscriptions"]["s1"]["msgBacklog"] == 0
    # Metadata-only calls are answered where they are asked.
    r = requests.get(f"{cluster.http(0)}/admin/v2/{rest(topic)}/partitions", allow_redirects=False,
                     timeout=TIMEOUT)
    assert r.status_code == 200 and r.json()["partitions"] == 0
    producer.close()
    consumer.close()


def test_partitioned_topic_calls_fan_out_to_each_partitions_owner(cluster, make_client):
    topic = cluster.spread_topic(6, "fan")
    base = f"{cluster.http(0)}/admin/v2/{rest(topic)}"
    assert requests.put(base + "/partitions", json=6, timeout=TIMEOUT).status_code == 204
    assert requests.put(base + "/subscription/s1", json="earliest", timeout=TIMEOUT).status_code == 204
    client = make_client(cluster.nodes[1].address.pulsar_url)
    producer = client.create_producer(topic)
    for i in range(30):
        producer.send(b"m%d" % i, partition_key=str(i))
    owners = {owner_name(cluster, f"{topic}-partition-{i}") for i in range(6)}
    assert len(owners) > 1  # spread over brokers, else this test proves nothing
    assert requests.get(base + "/subscriptions", timeout=TIMEOUT).json() == ["s1"]
    stats = requests.get(base + "/partitioned-stats", timeout=TIMEOUT).json()
    assert stats["metadata"]["partitions"] == 6 and len(stats["partitions"]) == 6
    assert stats["subscriptions"]["s1"]["msgBacklog"] == 30 and len(stats["publishers"]) == 6
    producer.close()
    assert requests.post(base + "/subscription/s1/skip_all", timeout=TIMEOUT).status_code == 204
    stats = requests.get(base + "/partitioned-stats?perPartition=false", timeout=TIMEOUT).json()
    assert stats["subscriptions"]["s1"]["msgBacklog"] == 0 and "partitions" not in stats
    assert requests.delete(base + "/subscription/s1", timeout=TIMEOUT).status_code == 204
    assert requests.get(base + "/subscriptions", timeout=TIMEOUT).json() == []
    assert requests.delete(base + "/partitions", timeout=TIMEOUT).status_code == 204
    assert requests.get(base + "/partitions", timeout=TIMEOUT).json()["partitions"] == 0


def test_drain_hands_every_topic_over_and_clients_keep_working(make_client):
    cluster = Cluster(2).start()
    try:
        topic = cluster.topic_for(1, "drain")
        client = make_client(cluster.http(0))
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "sub")
        for i in range(5):
            producer.send(b"before-%d" % i)
        assert owner_name(cluster, topic) == "b1"
        b1 = cluster.nodes[1]
        broker = b1.address.http_url.removeprefix("http://")
        r = requests.post(f"{cluster.http(0)}/admin/v2/brokers/standalone/{broker}/drain", timeout=TIMEOUT)
        assert r.status_code == 204
        assert b1.membership.state == DRAINING and not b1.placement.owned
        for i in range(5):
            producer.send(b"after-%d" % i)
        got = sorted(consumer.receive(timeout_millis=TIMEOUT * 1000).data() for _ in range(10))
        assert got == sorted([b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)])
        assert owner_name(cluster, topic) == "b0"
        view = requests.get(f"{cluster.http(0)}/admin/v2/nereus/cluster", timeout=TIMEOUT).json()
        assert {b["name"]: b["state"] for b in view["brokers"]} == {"b0": ACTIVE, "b1": DRAINING}
        # A lookup never sends a client to the draining broker.
        fresh = cluster.topic_for(0, "fresh")
        data = requests.get(f"{cluster.http(1)}/lookup/v2/topic/{rest(fresh)}", timeout=TIMEOUT).json()
        assert data["brokerUrl"] == cluster.nodes[0].address.pulsar_url
        r = requests.post(f"{cluster.http(1)}/admin/v2/brokers/standalone/b1/undrain", timeout=TIMEOUT)
        assert r.status_code == 204 and b1.membership.state == ACTIVE
        cluster.wait_until(lambda: all(n.membership.ring.owner(topic) == "b1" for n in cluster.nodes))
        assert requests.post(f"{cluster.http(0)}/admin/v2/brokers/standalone/nobody/drain",
                             timeout=TIMEOUT).status_code == 404
        producer.close()
        consumer.close()
    finally:
        cluster.stop()


def test_regex_subscription_over_http_finds_topics_on_every_broker(cluster, make_client, pulsar):
    prefix = f"rx-{uuid.uuid4().hex[:6]}"
    topics = [cluster.topic_for(i, prefix) for i in range(3)]
    client = make_client(cluster.http(1))
    for topic in topics:  # the topics exist before the subscription looks for them
        client.create_producer(topic).close()
    consumer = client.subscribe(re.compile(f"persistent://public/default/{prefix}-.*"), "rx",
                                initial_position=pulsar.InitialPosition.Earliest)
    for topic in topics:
        producer = client.create_producer(topic)
        producer.send(topic.encode())
        producer.close()
    got = sorted(consumer.receive(timeout_millis=TIMEOUT * 1000).data().decode() for _ in topics)
    assert got == sorted(topics)
    consumer.close()
    listed = requests.get(f"{cluster.http(0)}/admin/v2/namespaces/public/default/topics?mode=ALL",
                          timeout=TIMEOUT).json()
    assert set(topics) <= set(listed)
    assert requests.get(f"{cluster.http(0)}/admin/v2/namespaces/public/default/topics?mode=NON_PERSISTENT",
                        timeout=TIMEOUT).json() == []


def test_lookup_of_a_topic_whose_owner_incarnation_was_replaced_answers_at_once(cluster):
    topic = cluster.topic_for(1, "dead")
    meta = cluster.nodes[0].storage.meta
    # An owner record of an incarnation of b1 that is gone: b1 runs as a newer one, which could
    # bind the ports the old one had, so the old one is dead (its record goes without the session).
    cluster.run(meta.put(owner_key(topic), b'{"broker": "b1", "incarnation": "gone"}'))
    data = requests.get(f"{cluster.http(0)}/lookup/v2/topic/{rest(topic)}", timeout=TIMEOUT).json()
    assert data["brokerUrl"] == cluster.nodes[1].address.pulsar_url
    record = cluster.run(meta.get(owner_key(topic)))
    assert record is None or b'"gone"' not in record.value


def test_lookup_of_a_topic_whose_owner_left_unseen_answers_503(cluster):
    topic = cluster.topic_for(1, "left")
    meta = cluster.nodes[0].storage.meta
    # An owner this broker never saw registered: nothing tells it is dead, so its session decides.
    cluster.run(meta.put(owner_key(topic), b'{"broker": "b9", "incarnation": "unknown"}'))
    try:
        r = requests.get(f"{cluster.http(0)}/lookup/v2/topic/{rest(topic)}", timeout=TIMEOUT)
        assert r.status_code == 503 and "gone" in r.json()["reason"]
    finally:
        cluster.run(meta.delete(owner_key(topic)))
    data = requests.get(f"{cluster.http(0)}/lookup/v2/topic/{rest(topic)}", timeout=TIMEOUT).json()
    assert data["brokerUrl"] == cluster.nodes[1].address.pulsar_url


def test_unload_at_a_non_owner_unloads_at_the_owner_and_clients_come_back(cluster, make_client):
    topic = cluster.topic_for(2, "unload")
    client = make_client(cluster.http(0))
    producer = client.create_producer(topic)
    producer.send(b"one")
    b2 = cluster.nodes[2]
    before = b2.registry.loaded(topic)
    assert before is not None
    r = requests.put(f"{cluster.http(0)}/admin/v2/{rest(topic)}/unload", timeout=TIMEOUT)
    assert r.status_code == 204 and [h.status_code for h in r.history] == [307]
    assert before.closed
    producer.send(b"two")  # the producer looked the topic up again
    after = b2.registry.loaded(topic)
    assert after is not None and after is not before
    producer.close()
    missing = f"persistent://public/default/never-{uuid.uuid4().hex[:6]}"
    assert requests.put(f"{cluster.http(0)}/admin/v2/{rest(missing)}/unload", timeout=TIMEOUT).status_code == 404


def test_compaction_of_a_partitioned_topic_is_triggered_and_reported_over_every_partition(cluster, make_client,
                                                                                          pulsar):
    topic = cluster.spread_topic(6, "fanc")
    base = f"{cluster.http(0)}/admin/v2/{rest(topic)}"
    assert requests.put(base + "/partitions", json=6, timeout=TIMEOUT).status_code == 204
    client = make_client(cluster.nodes[1].address.pulsar_url)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        producer.send(b"v%d" % i, partition_key=f"k{i % 12}")
    producer.close()
    owners = {owner_name(cluster, f"{topic}-partition-{i}") for i in range(6)}
    assert len(owners) > 1  # spread over brokers, else this test proves nothing
    assert requests.put(base + "/compaction", timeout=TIMEOUT).status_code == 204
    deadline = time.monotonic() + TIMEOUT
    while (status := requests.get(base + "/compaction", timeout=TIMEOUT).json())["status"] != "SUCCESS":
        assert status["status"] in ("RUNNING", "SUCCESS"), status  # NOT_RUN: a partition was not asked
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    latest = {}
    for i in range(6):
        reader = client.create_reader(f"{topic}-partition-{i}", pulsar.MessageId.earliest, is_read_compacted=True)
        while reader.has_message_available():
            m = reader.read_next(timeout_millis=10000)
            assert m.partition_key() not in latest
            latest[m.partition_key()] = m.data()
        reader.close()
    assert latest == {f"k{k}": b"v%d" % (48 + k) for k in range(12)}


def test_a_lookup_of_a_recorded_topic_reads_no_namespace_policies(cluster, make_client):
    # After a failover every client looks its topics up again: for topics that exist, the
    # namespace's policies (needed only to decide on auto-creation) are not read.
    from nereus.ledger.policies import policies_key

    topic = cluster.topic_for(1)
    partitioned = f"persistent://public/default/p-{uuid.uuid4().hex[:8]}"
    assert requests.put(f"{cluster.http(1)}/admin/v2/{rest(partitioned)}/partitions", json=2,
                        timeout=TIMEOUT).status_code == 204
    writer = make_client(cluster.nodes[1].address.pulsar_url)
    writer.create_producer(topic).send(b"m")
    meta = cluster.nodes[0].storage.meta
    read = meta.get
    keys: list[str] = []

    async def counting_get(key, *args, **kwargs):
        keys.append(key)
        return await read(key, *args, **kwargs)

    meta.get = counting_get
    try:
        reader = make_client(cluster.nodes[0].address.pulsar_url)
        for name in (topic, partitioned):
            reader.create_producer(name).send(b"m")  # partitioned metadata and lookups at broker 0
    finally:
        del meta.get
    assert keys  # broker 0 did read the topics' records ...
    assert policies_key("public", "default") not in keys  # ... and not their namespace's policies
