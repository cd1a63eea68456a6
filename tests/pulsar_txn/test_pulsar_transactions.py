"""Pulsar transactions against a real standalone process.

Transactions are driven with the codec-built TxnClient (the official Python client
has none); what consumers see is checked with the official ``pulsar-client``.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid

import pytest

from nereus.codec.pulsar import pb
from tests.pulsar_txn.txn_client import ServerError, TxnClient
from tests.standalone_process import Standalone, admin
from tests.waiting import wait_until

pulsar = pytest.importorskip("pulsar")


@pytest.fixture
def clients():
    made = []

    def make(url: str):
        client = pulsar.Client(url, operation_timeout_seconds=10, connection_timeout_ms=3000,
                               logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def new_topic() -> str:
    return f"persistent://public/default/txn-{uuid.uuid4().hex[:10]}"


def received(consumer, timeout_ms: int = 10_000) -> bytes:
    msg = consumer.receive(timeout_millis=timeout_ms)
    consumer.acknowledge(msg)
    return msg.data()


def nothing_more(consumer, timeout_ms: int = 700) -> None:
    with pytest.raises(pulsar.Timeout):
        msg = consumer.receive(timeout_millis=timeout_ms)
        raise AssertionError(f"unexpected message {msg.data()!r}")


def test_coordinator_lookup_and_unknown_coordinator(standalone, txn):
    with pytest.raises(ServerError) as err:
        txn.request(pb.CommandTcClientConnectRequest(tc_id=5), "TC_CLIENT_CONNECT_RESPONSE")
    assert err.value.code == pb.TransactionCoordinatorNotFound
    with pytest.raises(ServerError) as err:
        txn.end_txn((0, 987654321), commit=True)
    assert err.value.code == pb.TransactionNotFound


def test_committed_messages_arrive_aborted_never(standalone, txn, clients):
    topic = new_topic()
    consumer = clients(standalone.url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = txn.create_producer(topic)
    committed, aborted = txn.new_txn(), txn.new_txn()
    producer.send(b"c1", committed)
    producer.send(b"a1", aborted)
    producer.send(b"plain")  # above the open transactions' first records: held by the LSO
    producer.send(b"c2", committed)
    nothing_more(consumer)
    txn.end_txn(aborted, commit=False)
    nothing_more(consumer)  # the committed transaction still holds the LSO
    txn.end_txn(committed, commit=True)
    assert [received(consumer) for _ in range(3)] == [b"c1", b"plain", b"c2"]
    nothing_more(consumer)
    # A retried END_TXN with the same outcome succeeds; the other outcome is refused.
    txn.end_txn(committed, commit=True)
    with pytest.raises(ServerError) as err:
        txn.end_txn(committed, commit=False)
    assert err.value.code == pb.InvalidTxnStatus


def test_send_to_a_partition_not_added_or_an_ended_txn_is_refused(standalone, txn):
    topic = new_topic()
    producer = txn.create_producer(topic)
    t = txn.new_txn()
    producer._added.add(t)  # skip ADD_PARTITION_TO_TXN
    with pytest.raises(ServerError) as err:
        producer.send(b"x", t)
    assert err.value.code == pb.NotAllowedError
    done = txn.new_txn()
    producer.send(b"y", done)
    txn.end_txn(done, commit=False)
    with pytest.raises(ServerError) as err:  # a late record is not stored behind the marker
        producer.send(b"late", done)
    assert err.value.code == pb.NotAllowedError
    with pytest.raises(ServerError):
        txn.add_partitions(done, [topic])
    assert producer.send(b"plain").entryId >= 0  # the producer itself goes on


def test_reader_and_read_compacted_stop_at_the_lso(standalone, txn, clients):
    topic = new_topic()
    producer = txn.create_producer(topic)
    producer.send(b"before")
    t = txn.new_txn()
    producer.send(b"in-txn", t)
    client = clients(standalone.url)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"before"
    assert not reader.has_message_available()
    compacted = client.subscribe(topic, "rc", initial_position=pulsar.InitialPosition.Earliest,
                                 is_read_compacted=True)
    assert received(compacted) == b"before"
    nothing_more(compacted)
    txn.end_txn(t, commit=True)
    assert reader.read_next(10_000).data() == b"in-txn"
    assert received(compacted) == b"in-txn"
    assert not reader.has_message_available()  # the marker is not a message


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover", "Shared", "KeyShared"])
def test_every_subscription_type_waits_for_commit(standalone, txn, clients, sub_type):
    topic = new_topic()
    consumer = clients(standalone.url).subscribe(topic, "s", consumer_type=getattr(pulsar.ConsumerType, sub_type),
                                                 initial_position=pulsar.InitialPosition.Earliest)
    producer = txn.create_producer(topic)
    t = txn.new_txn()
    producer.send(b"one", t)
    producer.send(b"two", t)
    nothing_more(consumer)
    txn.end_txn(t, commit=True)
    assert sorted(received(consumer) for _ in range(2)) == [b"one", b"two"]


def test_transaction_timeout_aborts(standalone, txn, clients):
    topic = new_topic()
    consumer = clients(standalone.url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = txn.create_producer(topic)
    t = txn.new_txn(timeout_ms=3000)  # the send below must come first even on a loaded machine
    producer.send(b"abandoned", t)
    producer.send(b"after")
    assert received(consumer, 30_000) == b"after"  # once the timeout aborted it, the LSO moved
    nothing_more(consumer)
    with pytest.raises(ServerError) as err:
        txn.end_txn(t, commit=True)
    assert err.value.code in (pb.InvalidTxnStatus, pb.TransactionNotFound)


def test_partitioned_topic(standalone, txn, clients):
    name = f"txnp-{uuid.uuid4().hex[:8]}"
    admin(standalone, "PUT", f"/persistent/public/default/{name}/partitions", 2)
    topic = f"persistent://public/default/{name}"
    consumer = clients(standalone.url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producers = [txn.create_producer(f"{topic}-partition-{i}") for i in range(2)]
    committed, aborted = txn.new_txn(), txn.new_txn()
    for i, producer in enumerate(producers):
        producer.send(f"c{i}".encode(), committed)
        producer.send(f"a{i}".encode(), aborted)
    txn.end_txn(aborted, commit=False)
    txn.end_txn(committed, commit=True)
    assert sorted(received(consumer) for _ in range(2)) == [b"c0", b"c1"]
    nothing_more(consumer)


def test_pending_acks_conflict_abort_and_commit(standalone, txn):
    topic = new_topic()
    producer = txn.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    consumer = txn.subscribe(topic, "acks")
    got = [consumer.receive() for _ in range(3)]
    assert [p for _, p in got] == [b"m0", b"m1", b"m2"]
    (id0, _), (id1, _), (id2, _) = got
    aborted, committed = txn.new_txn(), txn.new_txn()
    consumer.ack(id0, aborted)
    with pytest.raises(ServerError) as err:  # held by the other open transaction
        consumer.ack(id0, committed)
    assert err.value.code == pb.TransactionConflict
    consumer.ack(id1, committed)
    consumer.redeliver_unacked()  # only m2 is unacknowledged and not held
    again = consumer.receive()
    assert again[1] == b"m2"
    assert consumer.receive(timeout=0.7) is None
    txn.end_txn(aborted, commit=False)  # m0's ack dropped: delivered again
    assert consumer.receive()[1] == b"m0"
    txn.end_txn(committed, commit=True)
    consumer.redeliver_unacked()
    assert sorted(p for _, p in [consumer.receive(), consumer.receive()]) == [b"m0", b"m2"]
    assert consumer.receive(timeout=0.7) is None  # m1 is acknowledged for good


def test_restart_keeps_outcomes_and_pending_acks(tmp_path, clients):
    server = Standalone(tmp_path / "data")
    server.start()
    try:
        topic = new_topic()
        txn = TxnClient(server.pulsar_port)
        txn.connect_coordinator()
        producer = txn.create_producer(topic)
        committed, aborted, open_txn = txn.new_txn(), txn.new_txn(), txn.new_txn(timeout_ms=600_000)
        producer.send(b"keep", committed)
        producer.send(b"drop", aborted)
        producer.send(b"plain")
        txn.end_txn(committed, commit=True)
        txn.end_txn(aborted, commit=False)
        consumer = txn.subscribe(topic, "acks")
        got = {p: mid for mid, p in (consumer.receive() for _ in range(2))}
        assert set(got) == {b"keep", b"plain"}
        acked = txn.new_txn()
        consumer.ack(got[b"keep"], acked)
        consumer.ack(got[b"plain"], open_txn)
        txn.end_txn(acked, commit=True)
        txn.close()
        server.kill()
        server.start()
        # Committed ack gone for good; the open transaction's ack still holds "plain".
        txn = TxnClient(server.pulsar_port)
        txn.connect_coordinator()
        consumer = txn.subscribe(topic, "acks")
        assert consumer.receive(timeout=1.0) is None
        txn.end_txn(open_txn, commit=False)
        assert consumer.receive()[1] == b"plain"
        official = clients(server.url).subscribe(topic, "fresh", initial_position=pulsar.InitialPosition.Earliest)
        assert [received(official) for _ in range(2)] == [b"keep", b"plain"]
        nothing_more(official)
        txn.close()
    finally:
        server.kill()


def test_end_txn_on_partition_and_subscription(standalone, txn, clients):
    """What a coordinator sends a partition's broker: the participants' work, idempotent."""
    topic = new_topic()
    consumer = clients(standalone.url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = txn.create_producer(topic)
    t = txn.new_txn()
    producer.send(b"marked", t)
    for _ in range(2):  # a repeated request changes nothing
        txn.request(pb.CommandEndTxnOnPartition(txnid_most_bits=t[0], txnid_least_bits=t[1], topic=topic,
                                                txn_action=pb.COMMIT), "END_TXN_ON_PARTITION_RESPONSE")
    assert received(consumer) == b"marked"
    txn.request(pb.CommandEndTxnOnSubscription(
        txnid_most_bits=t[0], txnid_least_bits=t[1], subscription=pb.Subscription(topic=topic, subscription="s"),
        txn_action=pb.COMMIT), "END_TXN_ON_SUBSCRIPTION_RESPONSE")
    txn.end_txn(t, commit=True)  # the coordinator finds the marker in place


def test_skipped_records_leave_no_backlog(standalone, txn, clients):
    topic = new_topic()
    consumer = clients(standalone.url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    producer = txn.create_producer(topic)
    t = txn.new_txn()
    for i in range(3):
        producer.send(b"aborted-%d" % i, t)
    txn.end_txn(t, commit=False)
    producer.send(b"last")
    assert received(consumer) == b"last"
    rest = topic.split("://", 1)[1]

    def backlog() -> int:
        with urllib.request.urlopen(f"{standalone.http}/admin/v2/persistent/{rest}/stats", timeout=5) as r:
            return json.loads(r.read())["subscriptions"]["s"]["msgBacklog"]

    wait_until(lambda: backlog() == 0, what="no backlog once the aborted records and the marker were skipped")


def test_unsubscribe_drops_pending_acks(standalone, txn):
    topic = new_topic()
    producer = txn.create_producer(topic)
    producer.send(b"m")
    consumer = txn.subscribe(topic, "gone")
    mid, _ = consumer.receive()
    t = txn.new_txn()
    consumer.ack(mid, t)
    txn.request(pb.CommandUnsubscribe(consumer_id=consumer.consumer_id), "SUCCESS")
    other = TxnClient(standalone.pulsar_port)
    try:
        again = other.subscribe(topic, "gone")  # a new subscription of the same name
        assert again.receive()[1] == b"m"
        txn.end_txn(t, commit=True)  # finds no pending acks: the new subscription keeps its own state
        again.redeliver_unacked()
        assert again.receive()[1] == b"m"
    finally:
        other.close()


def test_http_lookup_of_the_coordinator(standalone):
    """What a client given an http:// service URL asks before it connects to a coordinator."""
    base = f"{standalone.http}/admin/v2/persistent/pulsar/system/transaction_coordinator_assign/partitions"
    with urllib.request.urlopen(base + "?checkAllowAutoCreation=true", timeout=5) as r:
        assert json.loads(r.read())["partitions"] == 1
    path = "/lookup/v2/topic/persistent/pulsar/system/transaction_coordinator_assign-partition-0"
    with urllib.request.urlopen(standalone.http + path, timeout=5) as r:
        assert json.loads(r.read())["brokerUrl"] == standalone.url
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(standalone.http + path.replace("partition-0", "partition-3"), timeout=5)
    assert err.value.code == 404
