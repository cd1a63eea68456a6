"""Topics spread over the brokers, and any single broker is a door to all of them."""

from __future__ import annotations

import pulsar
import pytest

from .clients import PUBLIC, pulsar_client, read_all

TOPICS = 30


@pytest.mark.parametrize("store", ["file", "s3"])
def test_topics_spread_and_any_broker_serves_every_topic(make_cluster, store):
    cluster = make_cluster(["a", "a", "b"], store=store)
    topics = [f"{PUBLIC}spread-{i}" for i in range(TOPICS)]
    brokers = cluster.brokers_list

    # Each broker, given alone as the service URL, produces to every topic.
    for broker in brokers:
        client = pulsar_client(broker.pulsar_url, cluster.root, f"produce-{broker.name}")
        try:
            for topic in topics:
                producer = client.create_producer(topic, batching_enabled=False)
                producer.send(f"via-{broker.name}".encode())
                producer.close()
        finally:
            client.close()

    owners = cluster.owners()
    assert set(topics) <= owners.keys(), f"topics without an owner record: {sorted(set(topics) - owners.keys())}"
    by_broker = {b.name: sorted(t for t in topics if owners[t] == b.name) for b in brokers}
    assert all(by_broker.values()), f"a broker owns none of {TOPICS} topics: { {k: len(v) for k, v in by_broker.items()} }"

    # Each broker alone reads every topic (a reader, and a durable subscription).
    want = sorted(f"via-{b.name}".encode() for b in brokers)
    for broker in brokers:
        client = pulsar_client(broker.pulsar_url, cluster.root, f"consume-{broker.name}")
        try:
            for topic in topics:
                assert sorted(read_all(client, topic)) == want, f"{topic} read through {broker.name}"
            for topic in topics[:: max(1, TOPICS // 6)]:
                consumer = client.subscribe(topic, f"sub-{broker.name}",
                                            initial_position=pulsar.InitialPosition.Earliest)
                got = [consumer.receive(timeout_millis=30_000) for _ in want]
                for msg in got:
                    consumer.acknowledge(msg)
                consumer.close()
                assert sorted(m.data() for m in got) == want, f"{topic} consumed through {broker.name}"
        finally:
            client.close()

    # Ownership did not move while clients came through different brokers.
    assert {t: cluster.owners()[t] for t in topics} == {t: owners[t] for t in topics}


@pytest.mark.parametrize("store", ["file", "s3"])
def test_kafka_bootstrap_to_one_broker_reaches_partitions_of_every_broker(make_cluster, store):
    """A Kafka client that knows one broker produces and consumes partitions owned across the cluster.

    Needs the cluster-aware Kafka Metadata (partition leaders = owners).
    """
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(["a", "a", "b"], store=store)
    topic, partitions = "kspread", 9
    first = cluster.brokers_list[0]
    admin = AdminClient({"bootstrap.servers": first.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(timeout=60)

    producer = Producer({"bootstrap.servers": first.bootstrap, "enable.idempotence": True,
                         "message.timeout.ms": 60_000, "linger.ms": 5})
    delivered, errors = {}, []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered[msg.value()] = (msg.partition(), msg.offset())

    for i in range(partitions * 20):
        producer.produce(topic, f"k-{i:05d}".encode(), partition=i % partitions, on_delivery=report)
        producer.poll(0)
    assert producer.flush(90) == 0, f"undelivered after 90 s; errors: {errors[:5]}"
    assert not errors, errors[:5]
    assert len(delivered) == partitions * 20

    owners = cluster.owners()
    part_owner = {p: owners.get(f"{PUBLIC}{topic}-partition-{p}") for p in range(partitions)}
    assert set(part_owner.values()) == {b.name for b in cluster.brokers_list}, \
        f"partitions are not spread over the three brokers: {part_owner}"
    # Every broker's Metadata names each partition's owner as its leader (the ownership records of
    # the others' partitions read together).
    port_of_owner = {b.name: int(b.bootstrap.rsplit(":", 1)[1]) for b in cluster.brokers_list}
    for broker in cluster.brokers_list:
        answer = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=30)
        port_of_node = {node.id: node.port for node in answer.brokers.values()}
        leaders = {p: port_of_node.get(m.leader) for p, m in answer.topics[topic].partitions.items()}
        assert leaders == {p: port_of_owner[part_owner[p]] for p in range(partitions)}, broker.name

    for broker in cluster.brokers_list:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{broker.name}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        got = {}
        try:
            cluster.wait_for(lambda: _poll_into(consumer, got) >= len(delivered), 90,
                             f"all {len(delivered)} records through {broker.name}")
        finally:
            consumer.close()
        assert {v: po for v, po in got.items()} == delivered


def _poll_into(consumer, got: dict) -> int:
    for msg in consumer.consume(500, timeout=0.5):
        if msg.error() is None:
            got[msg.value()] = (msg.partition(), msg.offset())
    return len(got)
