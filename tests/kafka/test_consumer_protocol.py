"""KIP-848's consumer group protocol (``group.protocol=consumer``) with confluent-kafka against a standalone."""

from __future__ import annotations

import datetime

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from .conftest import wait_until
from .raw import RawKafka
from .test_group_membership import Tracked, _poll_all, _settled, _topic

CONSUMER = {"group.protocol": "consumer"}


def _without_classic_settings(bootstrap: str, group: str, topic: str) -> Tracked:
    member = Tracked.__new__(Tracked)
    from confluent_kafka import Consumer

    member.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                "enable.auto.commit": False, **CONSUMER})
    member.assigned, member.revoked = [], []
    member.consumer.subscribe([topic], on_assign=member._on_assign, on_revoke=member._on_revoke)
    return member


def test_server_side_assignment_revokes_only_what_moves_and_commits_with_member_epochs(broker, topic, group):
    _topic(broker.bootstrap, topic, 4)
    first = _without_classic_settings(broker.bootstrap, group, topic)
    wait_until(lambda: _settled([first], 4, 4), timeout=30)
    second = _without_classic_settings(broker.bootstrap, group, topic)
    wait_until(lambda: _settled([first, second], 4, 2), timeout=40)
    kept = first.owned()
    assert set().union(*first.revoked) == {0, 1, 2, 3} - kept  # only what moved was revoked
    assert second.revoked == []

    # offsets commit against the member epoch
    first.consumer.commit(offsets=[TopicPartition(topic, p, 1) for p in kept], asynchronous=False)
    committed = first.consumer.committed([TopicPartition(topic, p) for p in kept], timeout=10)
    assert {tp.offset for tp in committed} == {1}

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert len(described.members) == 2
    assert sorted(p.partition for m in described.members for p in m.assignment.topic_partitions) == [0, 1, 2, 3]

    # a group is either classic or consumer: a classic JoinGroup is refused
    raw = RawKafka(broker.bootstrap)
    try:
        joined = raw.request(11, 5, group_id=group, session_timeout=datetime.timedelta(seconds=10),
                             rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
                             protocol_type="consumer", protocols=())
    finally:
        raw.close()
    assert joined.error_code.value == 23  # INCONSISTENT_GROUP_PROTOCOL

    second.consumer.close()  # leaves with epoch -1: the first member gets everything back
    wait_until(lambda: _settled([first], 4, 4), timeout=30)
    _poll_all(first)
    first.consumer.close()
