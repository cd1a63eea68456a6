"""Transactions in a cluster: one coordinator per broker over shared state, markers written by owners only."""

from __future__ import annotations

import json

import pytest

from nereus.broker.cluster.ownership import owner_key
from nereus.ledger.entry import EntryFlags, EntryFormat, EntryHeader, decode_entry
from nereus.kafka.server.txn.markers import send_marker
from nereus.ledger.naming import TopicName
from nereus.transactions import TxnState, kafka_key

from .cluster_harness import Cluster


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(2).start()
    yield cluster
    cluster.stop()


async def _produce(node, topic_name: str, pid: int, epoch: int) -> int:
    """A partition leader's transactional append (verify, begin, append); the stream id."""
    topic = await node.registry.get(TopicName.parse(topic_name))
    await topic.ensure_writer()
    rec = await node.transactions.verify(pid, epoch, topic_name)
    await node.kafka.stream_txns.begin(topic.stream_id, pid, epoch, topic.handle.next_offset(), sequence=rec.sequence)
    header = EntryHeader(EntryFormat.KAFKA, 1, producer_id=pid, producer_epoch=epoch,
                         flags=EntryFlags.TRANSACTIONAL | EntryFlags.BATCHED)
    await topic.append(header.pack() + b"payload", 1)
    return topic.stream_id


async def _control_entries(node, topic_name: str) -> list[EntryHeader]:
    topic = await node.registry.get(TopicName.parse(topic_name))
    await topic.handle.refresh()
    result = await topic.handle.fetch(0, topic.handle.next_offset(), max_bytes=1 << 20)
    headers = [decode_entry(e.data)[0] for e in result.entries]
    return [h for h in headers if h.flags & EntryFlags.CONTROL]


def test_every_broker_shares_one_coordinator_between_its_protocols(cluster):
    for node in cluster.nodes:
        assert node.transactions is node.kafka.transactions is node.pulsar.transactions
        assert node.kafka.stream_txns is node.pulsar.stream_txns
    assert cluster.nodes[0].transactions is not cluster.nodes[1].transactions


def test_a_commit_over_two_owners_completes_at_once_without_stealing_an_append_session(cluster):
    b0, b1 = cluster.nodes
    mine, theirs = cluster.topic_for(0, "txn"), cluster.topic_for(1, "txn")
    key = kafka_key("cluster-tx")
    pid, epoch = cluster.run(b0.transactions.init_producer("cluster-tx", 60_000))
    cluster.run(b1.transactions.add_partitions(key, pid, epoch, [mine, theirs]))
    cluster.run(_produce(b0, mine, pid, epoch))
    stream = cluster.run(_produce(b1, theirs, pid, epoch))
    forwarded = b0.kafka.txn_participants.markers_forwarded
    # b0 decides; b1 writes the marker of its partition on b0's WriteTxnMarkers, before end() returns
    rec = cluster.run(b0.transactions.end(key, pid, epoch, commit=True))
    assert rec.state == TxnState.COMPLETE_COMMIT
    assert b0.kafka.txn_participants.markers_forwarded == forwarded + 1
    for topic_name in (mine, theirs):
        markers = cluster.run(_control_entries(b1, topic_name))
        assert [(m.producer_id, m.producer_epoch) for m in markers] == [(pid, epoch)]
    owner = json.loads(cluster.run(b0.storage.meta.get(owner_key(theirs))).value)["broker"]
    assert owner == b1.membership.name
    topic = cluster.run(b1.registry.get(TopicName.parse(theirs)))
    assert topic.handle.writable  # b1 kept its append session
    view = cluster.run(b1.kafka.stream_txns.view(stream, topic.handle.next_offset()))
    assert view.lso == topic.handle.next_offset() and view.open == {}


async def _pause_recovery(coordinator) -> None:
    """Restart ``coordinator``'s loop with a long interval: its recovery does not run in the test."""
    coordinator._task.cancel()
    coordinator._task = None
    coordinator.interval = 600.0
    coordinator.start()


def test_without_forwarding_the_owner_writes_its_marker_when_it_sees_the_decision():
    cluster = Cluster(2).start()
    try:
        b0, b1 = cluster.nodes
        b0.kafka.txn_participants.register_remote_marker_writer(None)  # as when authorization is on
        for node in cluster.nodes:
            node.transactions.follow_decisions()
            cluster.run(_pause_recovery(node.transactions))
        mine, theirs = cluster.topic_for(0, "nofwd"), cluster.topic_for(1, "nofwd")
        key = kafka_key("nofwd-tx")
        pid, epoch = cluster.run(b0.transactions.init_producer("nofwd-tx", 60_000))
        cluster.run(b0.transactions.add_partitions(key, pid, epoch, [mine, theirs]))
        cluster.run(_produce(b0, mine, pid, epoch))
        cluster.run(_produce(b1, theirs, pid, epoch))
        # b0 decides (answering EndTxn at once, as Kafka's coordinator) and writes its own marker; b1
        # writes the marker of its partition when the decision's notification reaches it
        cluster.run(b0.transactions.end(key, pid, epoch, commit=True, wait=False))
        cluster.wait_until(lambda: cluster.run(b0.transactions.describe(key)).state == TxnState.COMPLETE_COMMIT)
        for topic_name in (mine, theirs):
            markers = cluster.run(_control_entries(b1, topic_name))
            assert [(m.producer_id, m.producer_epoch) for m in markers] == [(pid, epoch)]
        assert b0.kafka.txn_participants.markers_forwarded == 0
    finally:
        cluster.stop()


def test_a_late_forwarded_marker_leaves_the_next_transaction_of_the_producer_open(cluster):
    """WriteTxnMarkers names the transaction (its sequence number, in the coordinator epoch): a
    completion of transaction 1 repeated once transaction 2 began at the same producer epoch (as a
    recovery pass working from an old read does) writes no marker on the owner."""
    b0, b1 = cluster.nodes
    theirs = cluster.topic_for(1, "late")
    key = kafka_key("late-tx")
    pid, epoch = cluster.run(b0.transactions.init_producer("late-tx", 60_000))
    cluster.run(b0.transactions.add_partitions(key, pid, epoch, [theirs]))
    stream = cluster.run(_produce(b1, theirs, pid, epoch))
    first = cluster.run(b0.transactions.describe(key))
    assert cluster.run(b0.transactions.end(key, pid, epoch, commit=True)).state == TxnState.COMPLETE_COMMIT
    cluster.run(b0.transactions.add_partitions(key, pid, epoch, [theirs]))
    cluster.run(_produce(b1, theirs, pid, epoch))
    # the coordinator's own check leaves it out; so does the owner's, when asked over the wire
    cluster.run(b0.kafka.txn_participants.complete_partition(theirs, pid, epoch, False, sequence=first.sequence))
    cluster.run(send_marker(b1.membership.address, theirs, pid, epoch, False, first.sequence))
    assert len(cluster.run(_control_entries(b1, theirs))) == 1
    topic = cluster.run(b1.registry.get(TopicName.parse(theirs)))
    assert pid in cluster.run(b1.kafka.stream_txns.view(stream, topic.handle.next_offset())).open
    assert cluster.run(b0.transactions.end(key, pid, epoch, commit=True)).state == TxnState.COMPLETE_COMMIT
    markers = cluster.run(_control_entries(b1, theirs))
    assert [m.flags & EntryFlags.CONTROL for m in markers] == [EntryFlags.CONTROL] * 2
    view = cluster.run(b1.kafka.stream_txns.view(stream, topic.handle.next_offset()))
    assert view.open == {} and view.aborted(0, 100) == []
