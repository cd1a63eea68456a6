"""Routing at the wire, on real processes: lookups, refusals at a non-owner, coordinators, node ids, moves.

What the official clients rely on without showing it: a LOOKUP on any broker
redirects to the ring's broker, a PRODUCER or SUBSCRIBE at a non-owner fails with
ServiceNotReady (so they look up again), a topic's admin REST at a non-owner answers
307 to the owner, every broker names the same group coordinator, a broker keeps its
Kafka node id across a restart, and a topic moved away and back serves every commit.
"""

from __future__ import annotations

import time
import uuid

import pytest
import requests

from nereus.broker.cluster.ring import HashRing
from nereus.kafka.server.catalog.routing import coordinator_key
from nereus.codec.pulsar import pb, type_name, wrap
from tests.kafka.raw import RawKafka
from tests.pulsar_broker.rawclient import RawClient

from .clients import PUBLIC
from .conftest import started_cluster
from .harness import Cluster

Lookup = pb.CommandLookupTopicResponse
FIND_COORDINATOR, GROUP = 10, 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from started_cluster(tmp_path_factory.mktemp("cluster-routing"), ["a", "a", "b"])


def _ring(cluster: Cluster) -> HashRing:
    return HashRing({b.name: (b.zone, b.name) for b in cluster.running})


def _pulsar_call(port: int, command) -> tuple[str, object]:
    raw = RawClient(port)
    try:
        raw.connect()
        raw.send(wrap(command))
        while True:
            frame = raw.read()
            assert frame is not None, f"connection closed after {command}"
            if type_name(frame.type) not in ("PING", "PONG"):
                return type_name(frame.type), frame.body
    finally:
        raw.close()


def _lookup(port: int, topic: str, authoritative: bool = False) -> Lookup:
    kind, body = _pulsar_call(port, pb.CommandLookupTopic(request_id=1, topic=topic, authoritative=authoritative))
    assert kind == "LOOKUP_RESPONSE", (kind, body)
    return body


def test_pulsar_lookup_redirects_to_the_owner_and_a_non_owner_refuses_producers_and_consumers(cluster):
    topic = f"{PUBLIC}wire-{uuid.uuid4().hex[:8]}"
    target = cluster.broker(_ring(cluster).owner(topic))
    others = [b for b in cluster.brokers_list if b is not target]

    # Nobody owns it yet: another broker redirects (authoritatively) to the ring's broker, which then connects.
    for other in others:
        answer = _lookup(other.ports["pulsar"], topic)
        assert (answer.response, answer.brokerServiceUrl, answer.authoritative) == \
            (Lookup.Redirect, target.pulsar_url, True), answer
    answer = _lookup(target.ports["pulsar"], topic, authoritative=True)
    assert (answer.response, answer.brokerServiceUrl) == (Lookup.Connect, target.pulsar_url), answer
    kind, body = _pulsar_call(target.ports["pulsar"], pb.CommandProducer(topic=topic, producer_id=1, request_id=2))
    assert kind == "PRODUCER_SUCCESS", (kind, body)
    assert cluster.owner(topic) == target.name
    for other in others:  # owned now: every broker answers Connect to the owner
        answer = _lookup(other.ports["pulsar"], topic)
        assert (answer.response, answer.brokerServiceUrl) == (Lookup.Connect, target.pulsar_url), answer

    # A client that skips the lookup and produces or subscribes at a non-owner is told to look up again.
    for other in others:
        for command in (pb.CommandProducer(topic=topic, producer_id=1, request_id=3),
                        pb.CommandSubscribe(topic=topic, subscription="s", consumer_id=1, request_id=4,
                                            subType=pb.CommandSubscribe.Exclusive)):
            kind, body = _pulsar_call(other.ports["pulsar"], command)
            assert (kind, body.error) == ("ERROR", pb.ServiceNotReady), (other.name, kind, body)

    # Topic admin REST at a non-owner: 307 to the owner's HTTP address, which answers.
    path = f"/admin/v2/persistent/public/default/{topic.removeprefix(PUBLIC)}/stats"
    for other in others:
        response = requests.get(other.http_url + path, allow_redirects=False, timeout=30)
        assert response.status_code == 307, (other.name, response.status_code, response.text)
        assert response.headers["Location"].startswith(target.http_url + path), response.headers["Location"]
    assert requests.get(others[0].http_url + path, timeout=30).json()["msgInCounter"] == 0
    # ... as do the message reads (lastMessageId, examinemessage: the topic is still empty there).
    base = path.removesuffix("/stats")
    for suffix, status in (("/lastMessageId", 200), ("/examinemessage", 412)):
        for other in others:
            response = requests.get(other.http_url + base + suffix, allow_redirects=False, timeout=30)
            assert response.status_code == 307, (suffix, other.name, response.status_code, response.text)
        followed = requests.get(others[0].http_url + base + suffix, timeout=30)
        assert followed.status_code == status, (suffix, followed.text)

    # PARTITIONED_METADATA on any broker.
    parted = f"wire-parted-{uuid.uuid4().hex[:8]}"
    created = requests.put(f"{others[0].http_url}/admin/v2/persistent/public/default/{parted}/partitions",
                           json=4, timeout=30)
    assert created.status_code in (200, 204), created.text
    for broker in cluster.brokers_list:
        for name, partitions in ((PUBLIC + parted, 4), (topic, 0)):
            kind, body = _pulsar_call(broker.ports["pulsar"],
                                      pb.CommandPartitionedTopicMetadata(topic=name, request_id=5))
            assert (kind, body.partitions) == ("PARTITIONED_METADATA_RESPONSE", partitions), (broker.name, body)


def test_broker_admin_lists_failure_domains_owned_namespaces_version_and_readiness(cluster):
    owner, other = cluster.brokers_list[0], cluster.brokers_list[2]
    ids = {b.name: f"127.0.0.1:{b.ports['http']}" for b in cluster.brokers_list}
    domains = requests.get(f"{other.http_url}/admin/v2/clusters/standalone/failureDomains", timeout=30).json()
    assert {zone: sorted(d["brokers"]) for zone, d in domains.items()} == \
        {"a": sorted([ids["b1"], ids["b2"]]), "b": [ids["b3"]]}, domains
    assert requests.get(f"{other.http_url}/admin/v2/clusters/standalone/failureDomains/b",
                        timeout=30).json() == {"brokers": [ids["b3"]]}
    assert requests.get(f"{other.http_url}/admin/v2/clusters/standalone/failureDomains/c",
                        timeout=30).status_code == 404

    prefix = f"public/default/{uuid.uuid4().hex[:8]}"
    topic = next(t for t in (f"persistent://{prefix}-{i}" for i in range(1000))
                 if _ring(cluster).owner(t) == owner.name)
    namespace = prefix.rsplit("/", 1)[0]
    _pulsar_call(owner.ports["pulsar"], pb.CommandProducer(topic=topic, producer_id=1, request_id=1))
    path = f"/admin/v2/brokers/standalone/{ids[owner.name]}/ownedNamespaces"
    redirected = requests.get(other.http_url + path, allow_redirects=False, timeout=30)
    assert redirected.status_code == 307 and redirected.headers["Location"] == owner.http_url + path
    owned = requests.get(other.http_url + path, timeout=30).json()
    assert owned[f"{namespace}/0x00000000_0xffffffff"]["broker_assignment"] == "primary", owned
    assert requests.get(f"{other.http_url}/admin/v2/brokers/standalone/127.0.0.1:1/ownedNamespaces",
                        timeout=30).status_code == 404

    for broker in cluster.brokers_list:
        assert requests.get(f"{broker.http_url}/admin/v2/brokers/ready", timeout=30).text == "ok"
        version = requests.get(f"{broker.http_url}/admin/v2/brokers/version", timeout=30)
        assert version.status_code == 200 and version.text[:1].isdigit(), version.text


def _kafka_nodes(cluster: Cluster, via) -> dict[str, tuple[int, str]]:
    """Broker name -> (Kafka node id, rack), as DescribeCluster on ``via`` lists them."""
    from confluent_kafka.admin import AdminClient

    by_port = {b.ports["kafka"]: b.name for b in cluster.brokers_list}
    admin = AdminClient({"bootstrap.servers": via.bootstrap})  # held: a collected client fails its futures
    described = admin.describe_cluster().result(timeout=30)
    return {by_port[n.port]: (n.id, n.rack) for n in described.nodes}


def _coordinator(broker, group: str) -> int:
    raw = RawKafka(broker.bootstrap)
    try:
        answer = raw.request(FIND_COORDINATOR, 3, key=group, key_type=GROUP)
    finally:
        raw.close()
    assert answer.error_code == 0, answer
    return answer.node_id


def test_every_broker_names_the_group_coordinator_the_ring_picks(cluster):
    nodes = _kafka_nodes(cluster, cluster.brokers_list[0])
    assert {name: rack for name, (_id, rack) in nodes.items()} == {b.name: b.zone for b in cluster.brokers_list}
    ring = _ring(cluster)
    coordinators = set()
    for i in range(12):
        group = f"wire-group-{i}"
        want = nodes[ring.owner(coordinator_key(group))][0]
        assert [_coordinator(b, group) for b in cluster.brokers_list] == [want] * 3, group
        coordinators.add(want)
    assert len(coordinators) > 1, "twelve groups all on one coordinator"


def test_assigned_replicas_are_listed_as_given_and_their_first_broker_leads(cluster):
    """Each partition is led by the first broker of its assigned replicas, not the ring's broker
    (the assignment below never names the ring's broker first); a factor above the broker
    count is taken and answered with every live broker, the leader first."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    nodes = _kafka_nodes(cluster, cluster.brokers_list[0])
    ids = sorted(node for node, _rack in nodes.values())
    ring = _ring(cluster)
    topic = f"assigned-{uuid.uuid4().hex[:8]}"

    def assignment(index: int) -> list[int]:
        ring_node = nodes[ring.owner(f"persistent://public/default/{topic}-partition-{index}")][0]
        first = next(n for n in ids[index % 3:] + ids[:index % 3] if n != ring_node)
        return [first] + [n for n in ids if n != first][::1 if index % 2 else -1]

    assigned = [assignment(i) for i in range(4)]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    admin.create_topics([NewTopic(topic, 3, replica_assignment=assigned[:3])])[topic].result(30)
    admin.create_partitions([NewPartitions(topic, 4, replica_assignment=[assigned[3]])])[topic].result(30)

    def layout(via, name=topic):
        meta = AdminClient({"bootstrap.servers": via.bootstrap}).list_topics(name, timeout=30).topics[name]
        return [(p.leader, p.replicas, p.isrs) for _, p in sorted(meta.partitions.items())]

    def listed_everywhere(expected):
        for broker in cluster.brokers_list:
            deadline = time.monotonic() + 30
            while layout(broker) != expected:
                assert time.monotonic() < deadline, (broker.name, layout(broker), expected)
                time.sleep(0.2)

    expected = [(ids_[0], ids_, ids_) for ids_ in assigned]
    listed_everywhere(expected)  # nobody owns a partition yet: each is listed with the broker that will
    producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all"})
    for index in range(4):
        producer.produce(topic, b"v%d" % index, partition=index)
    assert producer.flush(60) == 0
    listed_everywhere(expected)
    wide = topic + "-rf5"
    admin.create_topics([NewTopic(wide, 1, replication_factor=5)])[wide].result(30)
    producer.produce(wide, b"v", partition=0)
    assert producer.flush(60) == 0
    (leader, replicas, isrs), = layout(cluster.brokers_list[0], wide)
    assert replicas == isrs and replicas[0] == leader and sorted(replicas) == ids


def test_a_topic_moved_away_and_back_serves_every_commit_and_a_zone_reader_follows_it(cluster):
    """Drain and undrain the owner: no record is lost, offsets stay dense, the first owner sees the second's."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    zone_b = next(b for b in cluster.brokers_list if b.zone == "b")
    ring = _ring(cluster)
    topic = next(name for name in (f"moves-{uuid.uuid4().hex[:8]}" for _ in range(1000))
                 if cluster.broker(ring.owner(f"{PUBLIC}{name}-partition-0")).zone == "a")
    partition, stream = 0, f"{PUBLIC}{topic}-partition-0"
    owner = cluster.broker(ring.owner(stream))
    admin = AdminClient({"bootstrap.servers": zone_b.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=30)[topic].result(timeout=60)

    producer = Producer({"bootstrap.servers": zone_b.bootstrap, "enable.idempotence": True,
                         "message.timeout.ms": 60_000})
    tail = Consumer({"bootstrap.servers": zone_b.bootstrap, "group.id": topic, "client.rack": "b",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 200})
    tail.assign([TopicPartition(topic, partition, 0)])
    seen: list[tuple[int, bytes]] = []

    def produce_and_follow(tag: str) -> None:
        for i in range(10):
            producer.produce(topic, f"{tag}-{i}".encode(), partition=partition)
        assert producer.flush(60) == 0
        want = len(seen) + 10
        cluster.wait_for(lambda: _poll_into(tail, seen) >= want, 60, f"the zone-b reader has {want} records")

    def admin_post(action: str) -> None:
        address = owner.http_url.removeprefix("http://")
        r = requests.post(f"{owner.http_url}/admin/v2/brokers/standalone/{address}/{action}", timeout=60)
        assert r.status_code == 204, (action, r.status_code, r.text)

    try:
        produce_and_follow("first")
        admin_post("drain")
        cluster.wait_for(lambda: cluster.owner(stream) not in (None, owner.name), 60, f"{stream} handed over")
        second = cluster.owner(stream)
        produce_and_follow("second")
        admin_post("undrain")
        cluster.wait_for(lambda: cluster.owner(stream) == owner.name, 60, f"{stream} back on {owner.name}")
        produce_and_follow("third")
    finally:
        tail.close()
        admin_post("undrain")

    want = [f"{tag}-{i}".encode() for tag in ("first", "second", "third") for i in range(10)]
    assert seen == list(enumerate(want)), seen
    # The first owner, back, reads what the second one committed meanwhile (its old cache was dropped).
    direct = Consumer({"bootstrap.servers": owner.bootstrap, "group.id": topic + "-direct",
                       "auto.offset.reset": "earliest", "enable.auto.commit": False})
    direct.assign([TopicPartition(topic, partition, 0)])
    got: list[tuple[int, bytes]] = []
    try:
        cluster.wait_for(lambda: _poll_into(direct, got) >= len(want), 60, f"{len(want)} records from {owner.name}")
    finally:
        direct.close()
    assert got == list(enumerate(want)), (second, got)


def _leases(broker) -> dict[str, str | None]:
    """Cluster-wide worker -> the broker holding its lease, as ``broker`` sees it."""
    return requests.get(f"{broker.http_url}/admin/v2/nereus/cluster", timeout=30).json()["leases"]


def test_the_lease_holder_killed_hands_its_workers_on_and_keeps_its_kafka_node_id(cluster):
    """kill -9 of the broker running GC and retention: another takes them; back, it has its node id."""
    before = _kafka_nodes(cluster, cluster.brokers_list[0])
    assert len({node for node, _rack in before.values()}) == 3, before
    first = cluster.brokers_list[0]
    leases = cluster.wait_for(lambda: (held := _leases(first)) and {"gc", "retention"} <= held.keys()
                              and all(held.values()) and held, 30, "the gc and retention leases held")
    victim = cluster.broker(leases["gc"])
    survivor = next(b for b in cluster.brokers_list if b is not victim)
    victim.kill()
    cluster.wait_for(lambda: all(holder not in (None, victim.name) for holder in _leases(survivor).values()), 60,
                     f"every lease of {sorted(leases)} held by a live broker after {victim.name} was killed")
    started = time.monotonic()
    victim.launch()
    victim.wait_ready()
    cluster.wait_ring_settled()
    print(f"{victim.name} back in {time.monotonic() - started:.1f}s")
    for broker in cluster.brokers_list:
        assert cluster.wait_for(lambda: _kafka_nodes(cluster, broker) == before, 60,
                                f"{broker.name} lists every broker with its old node id")
    # A lease may move again under load (a holder whose session lapses lets go), so what must hold
    # is that each worker runs on exactly one broker: the one its record names.
    cluster.wait_for(lambda: _one_runner_per_worker(cluster, set(leases)), 60,
                     "each worker run by exactly the broker its lease record names")


def _one_runner_per_worker(cluster, workers: set[str]) -> bool:
    views = {b.name: requests.get(f"{b.http_url}/admin/v2/nereus/cluster", timeout=30).json()
             for b in cluster.brokers_list}
    records = next(iter(views.values()))["leases"]
    if set(records) != workers or not all(records.values()):
        return False
    runners = {w: {name for name, view in views.items() if view["localLeases"].get(w) == name} for w in workers}
    return all(view["leases"] == records for view in views.values()) \
        and all(runners[w] == {records[w]} for w in workers)


def _poll_into(consumer, got: list) -> int:
    for msg in consumer.consume(100, timeout=0.3):
        if msg.error() is None:
            got.append((msg.offset(), msg.value()))
    return len(got)
