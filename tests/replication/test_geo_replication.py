"""Geo-replication between two clusters (one standalone each) with the official Pulsar client.

East reaches west through a cutting proxy (``geo.py``); west reaches east directly.
"""

from __future__ import annotations

import time

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from tests.pulsar_txn.txn_client import TxnClient
from tests.replication.geo import admin, clusters, replicate_namespace, stats, stats_once_there
from tests.waiting import wait_until

NAMESPACE = "geo/ns"
#: How long the link is down in the outage test (the issue's scenario: a minute).
OUTAGE_SECONDS = 60.0


class Reading(Record):
    sensor = String()
    value = Integer()


class Earlier(Record):
    sensor = String()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    with clusters(tmp_path_factory.mktemp("geo"), ["east", "west"], behind_proxy=("west",)) as (east, west):
        replicate_namespace([east, west], NAMESPACE)
        yield east, west


@pytest.fixture(scope="module")
def clients(pair):
    east, west = pair
    made = pulsar.Client(east.node.url), pulsar.Client(west.node.url)
    yield made
    for client in made:
        client.close()


def receive_all(consumer, count: int, timeout_ms: int = 30_000) -> list:
    out = []
    while len(out) < count:
        message = consumer.receive(timeout_millis=timeout_ms)
        consumer.acknowledge(message)
        out.append(message)
    return out


def nothing_more(consumer) -> bool:
    try:
        message = consumer.receive(timeout_millis=500)
    except pulsar.Timeout:
        return True
    raise AssertionError(f"unexpected message {message.data()!r} from {message.topic_name()}")


def test_east_publishes_and_west_consumes_everything_once_in_order_and_back(pair, clients):
    east, west = pair
    east_client, west_client = clients
    topic = f"persistent://{NAMESPACE}/both-ways"
    in_west = west_client.subscribe(topic, "w", initial_position=pulsar.InitialPosition.Earliest)
    in_east = east_client.subscribe(topic, "e", initial_position=pulsar.InitialPosition.Earliest)
    producer = east_client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    for i in range(500):
        producer.send_async(f"east-{i}".encode(), None, properties={"i": str(i)}, partition_key=f"k{i % 7}",
                            event_timestamp=1_000_000 + i)
    producer.flush()
    got = receive_all(in_west, 500)
    assert [m.data() for m in got] == [f"east-{i}".encode() for i in range(500)]
    assert [m.properties() for m in got] == [{"i": str(i)} for i in range(500)]
    assert [m.partition_key() for m in got] == [f"k{i % 7}" for i in range(500)]
    assert [m.event_timestamp() for m in got] == [1_000_000 + i for i in range(500)]
    assert len(receive_all(in_east, 500)) == 500  # east's own

    back = west_client.create_producer(topic)
    for i in range(20):
        back.send(f"west-{i}".encode())
    assert [m.data() for m in receive_all(in_east, 20)] == [f"west-{i}".encode() for i in range(20)]
    assert [m.data() for m in receive_all(in_west, 20)] == [f"west-{i}".encode() for i in range(20)]
    # Nothing comes back: what west got from east is not sent to east again, nor the reverse.
    assert nothing_more(in_west) and nothing_more(in_east)
    assert stats(west.node, topic)["msgInCounter"] == 520
    assert stats(east.node, topic)["msgInCounter"] == 520
    replication = wait_until(lambda: (r := stats(east.node, topic)["replication"].get("west"))
                             and r["replicationBacklog"] == 0 and r, "east's replicator to west caught up")
    assert replication["connected"] is True
    assert "pulsar.repl.west" in stats(east.node, topic)["subscriptions"]  # its cursor holds the backlog
    backlog = admin(east.node, "GET", f"/persistent/{NAMESPACE}/both-ways/backlog")
    assert backlog["cursorDetails"]["pulsar.repl.west"]["cursorBacklog"] == 0
    assert backlog["totalMessages"] == 520
    metrics = east.node.metrics()
    assert f'pulsar_replication_backlog{{remote_cluster="west",topic="{topic}"}} 0.0' in metrics
    assert f'pulsar_replication_connected_count{{remote_cluster="west",topic="{topic}"}} 1.0' in metrics


def test_a_partitioned_topic_replicates_partition_by_partition_and_is_created_remotely(pair, clients):
    east, west = pair
    east_client, west_client = clients
    topic = f"persistent://{NAMESPACE}/parted"
    admin(east.node, "PUT", f"/persistent/{NAMESPACE}/parted/partitions", 3)
    producer = east_client.create_producer(topic, batching_enabled=False)
    for i in range(60):
        producer.send(f"p-{i}".encode(), partition_key=f"key-{i % 5}")
    wait_until(lambda: admin(west.node, "GET", f"/persistent/{NAMESPACE}/parted/partitions")["partitions"] == 3,
               "the partitioned topic made in west")
    replication = admin(east.node, "GET", f"/persistent/{NAMESPACE}/parted/partitioned-stats")["replication"]
    assert replication["west"]["connected"] is True
    consumer = west_client.subscribe(topic, "w", initial_position=pulsar.InitialPosition.Earliest)
    got = receive_all(consumer, 60)
    per_key: dict[str, list[int]] = {}
    for message in got:
        per_key.setdefault(message.partition_key(), []).append(int(message.data()[2:]))
    assert sorted(int(m.data()[2:]) for m in got) == list(range(60))
    assert all(values == sorted(values) for values in per_key.values())  # order kept per partition
    assert nothing_more(consumer)


def test_a_cut_link_catches_up_with_no_loss_and_no_duplicate(pair, clients):
    east, west = pair
    east_client, west_client = clients
    topic = f"persistent://{NAMESPACE}/cut"
    consumer = west_client.subscribe(topic, "w", initial_position=pulsar.InitialPosition.Earliest)
    producer = east_client.create_producer(topic, batching_enabled=True, batching_max_messages=20,
                                           block_if_queue_full=True)
    west.proxy.start_cutting(0.05, 0.3, 1000)
    sent = 0
    while west.proxy.cuts < 5 or sent < 3000:  # publishing goes on across several cuts
        for _ in range(100):
            producer.send_async(f"c-{sent}".encode(), None)
            sent += 1
        producer.flush()
    west.proxy.stop_cutting()
    # Then an outage: every connection is cut at once for a while, and publishing goes on.
    cuts = west.proxy.cuts
    west.proxy.start_cutting(0.0, 0.02, 100_000)
    while west.proxy.cuts < cuts + 30:
        for _ in range(50):
            producer.send_async(f"c-{sent}".encode(), None)
            sent += 1
        producer.flush()
    west.proxy.stop_cutting()
    got = receive_all(consumer, sent, timeout_ms=60_000)
    assert [m.data() for m in got] == [f"c-{i}".encode() for i in range(sent)]
    assert nothing_more(consumer)


def test_only_committed_transactions_are_replicated(pair, clients):
    east, west = pair
    topic = f"persistent://{NAMESPACE}/txn"
    client = TxnClient(east.node.pulsar_port)
    try:
        assert client.connect_coordinator() == 1
        consumer = clients[1].subscribe(topic, "w", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        committed, aborted = client.new_txn(), client.new_txn()
        for i in range(5):
            producer.send(f"kept-{i}".encode(), committed)
            producer.send(f"dropped-{i}".encode(), aborted)
        client.end_txn(aborted, commit=False)
        client.end_txn(committed, commit=True)
        producer.send(b"plain")
        got = [m.data() for m in receive_all(consumer, 6)]
        assert got == [f"kept-{i}".encode() for i in range(5)] + [b"plain"]
        assert nothing_more(consumer)
    finally:
        client.close()


def test_the_replicator_cursor_name_is_reserved(clients):
    with pytest.raises(pulsar.PulsarException):
        clients[0].subscribe(f"persistent://{NAMESPACE}/reserved", "pulsar.repl.west")


def test_a_replicated_subscription_resumes_in_the_other_cluster_no_earlier_than_its_last_snapshot(pair, clients):
    east, west = pair
    east_client, west_client = clients
    topic = f"persistent://{NAMESPACE}/replicated-sub"
    in_east = east_client.subscribe(topic, "rs", initial_position=pulsar.InitialPosition.Earliest,
                                    replicate_subscription_state_enabled=True)
    producer = east_client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    for i in range(1000):
        producer.send_async(f"r-{i}".encode(), None)
    producer.flush()
    assert len(receive_all(in_east, 1000)) == 1000
    assert stats(east.node, topic)["subscriptions"]["rs"]["isReplicated"] is True

    def west_subscription_past_the_messages():
        # Its backlog still counts the snapshot markers after the last message (never delivered).
        there = stats_once_there(west.node, topic)
        subscription = there["subscriptions"].get("rs") if there is not None else None
        return subscription is not None and subscription["msgBacklog"] < 10

    wait_until(west_subscription_past_the_messages, "the subscription carried to west, past the 1,000 messages")
    in_east.close()
    for i in range(10):  # published after the move: the consumer in west gets exactly these
        producer.send(f"after-{i}".encode())
    in_west = west_client.subscribe(topic, "rs", replicate_subscription_state_enabled=True)
    assert [m.data() for m in receive_all(in_west, 10)] == [f"after-{i}".encode() for i in range(10)]
    assert nothing_more(in_west)


def test_schemas_are_registered_in_the_other_cluster_and_typed_consumers_read_there(pair, clients):
    east, west = pair
    east_client, west_client = clients
    topic = f"persistent://{NAMESPACE}/typed"
    # West has a version of its own first, so the numbers differ between the clusters.
    admin(west.node, "PUT", f"/namespaces/{NAMESPACE}/schemaCompatibilityStrategy", "ALWAYS_COMPATIBLE")
    west_client.create_producer(topic, schema=AvroSchema(Earlier)).close()
    producer = east_client.create_producer(topic, schema=AvroSchema(Reading))
    for i in range(20):
        producer.send(Reading(sensor=f"s{i % 3}", value=i))
    consumer = west_client.subscribe(topic, "typed", schema=AvroSchema(Reading),
                                     initial_position=pulsar.InitialPosition.Earliest)
    got = receive_all(consumer, 20)
    assert [(m.value().sensor, m.value().value) for m in got] == [(f"s{i % 3}", i) for i in range(20)]
    versions = admin(west.node, "GET", f"/schemas/{NAMESPACE}/typed/schemas")["getSchemaResponses"]
    assert len(versions) == 2 and "value" in versions[-1]["data"]  # east's registered after west's own


def test_a_cluster_taken_out_of_the_replication_list_drops_its_replicator_and_cursor(pair, clients):
    east, west = pair
    namespace = "geo/leaving"
    replicate_namespace([east, west], namespace)
    topic = f"persistent://{namespace}/t"
    producer = clients[0].create_producer(topic)
    producer.send(b"one")
    wait_until(lambda: "pulsar.repl.west" in stats(east.node, topic)["subscriptions"], "the replicator's cursor")
    admin(east.node, "POST", f"/namespaces/{namespace}/replication", ["east"])
    wait_until(lambda: stats(east.node, topic)["replication"] == {}, "the replicator stopped")
    wait_until(lambda: "pulsar.repl.west" not in stats(east.node, topic)["subscriptions"], "its cursor dropped")


def test_a_link_down_for_a_minute_catches_up_with_no_loss_and_no_duplicate(pair, clients):
    east, west = pair
    east_client, west_client = clients
    topic = f"persistent://{NAMESPACE}/outage"
    consumer = west_client.subscribe(topic, "w", initial_position=pulsar.InitialPosition.Earliest)
    producer = east_client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
    producer.send(b"o-0")
    receive_all(consumer, 1)
    cuts = west.proxy.cuts
    west.proxy.start_cutting(0.0, 0.01, 10**9)  # every connection east makes to west dies at once
    deadline = time.monotonic() + OUTAGE_SECONDS
    sent = 1
    while time.monotonic() < deadline:  # a minute of publishing while west is out of reach
        for _ in range(20):
            producer.send_async(f"o-{sent}".encode(), None)
            sent += 1
        producer.flush()
        time.sleep(0.05)  # paces the publishing only; nothing waits on it
    assert west.proxy.cuts > cuts + 10  # the replicator kept trying, and kept being cut
    west.proxy.stop_cutting()
    got = receive_all(consumer, sent - 1, timeout_ms=60_000)
    assert [m.data() for m in got] == [f"o-{i}".encode() for i in range(1, sent)]
    assert nothing_more(consumer)
