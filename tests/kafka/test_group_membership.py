"""Static membership (KIP-345) and cooperative incremental rebalancing (KIP-429) with confluent-kafka."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from .conftest import wait_until


class Tracked:
    """A subscribed consumer recording its assign / revoke callbacks."""

    def __init__(self, bootstrap: str, group: str, topic: str, **extra) -> None:
        conf = {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300}
        conf.update(extra)
        self.consumer = Consumer(conf)
        self.assigned: list[set[int]] = []
        self.revoked: list[set[int]] = []
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer, partitions) -> None:
        self.assigned.append({tp.partition for tp in partitions})

    def _on_revoke(self, consumer, partitions) -> None:
        self.revoked.append({tp.partition for tp in partitions})

    def owned(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def _topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(partitions):
        producer.produce(topic, value=b"x", partition=p)
    assert producer.flush(10) == 0


def _poll_all(*members: Tracked) -> None:
    for m in members:
        m.consumer.poll(0.1)


def _settled(members: list[Tracked], partitions: int, each: int) -> bool:
    _poll_all(*members)
    owned = [m.owned() for m in members]
    return all(len(o) == each for o in owned) and set().union(*owned) == set(range(partitions))


def test_static_member_restart_keeps_its_partitions_without_rebalancing_the_other(broker, topic, group):
    _topic(broker.bootstrap, topic, 4)
    first = Tracked(broker.bootstrap, group, topic, **{"group.instance.id": "first"})
    second = Tracked(broker.bootstrap, group, topic, **{"group.instance.id": "second"})
    wait_until(lambda: _settled([first, second], 4, 2), timeout=40)
    kept, before = first.owned(), second.owned()
    revocations = len(first.revoked)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert sorted(m.group_instance_id for m in described.members) == ["first", "second"]
    old_ids = {m.member_id for m in described.members}

    second.consumer.close()  # a static member sends no LeaveGroup: its place is kept for a session
    restarted = Tracked(broker.bootstrap, group, topic, **{"group.instance.id": "second"})
    wait_until(lambda: (_poll_all(first, restarted), restarted.owned() == before)[1], timeout=30)
    for _ in range(5):
        _poll_all(first, restarted)
    assert first.owned() == kept and len(first.revoked) == revocations  # the other member was not rebalanced
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert sorted(m.group_instance_id for m in described.members) == ["first", "second"]
    assert len({m.member_id for m in described.members} - old_ids) == 1  # the restarted one has a new member id
    first.consumer.close()
    restarted.consumer.close()


def test_cooperative_sticky_two_to_three_members_never_revokes_kept_partitions(broker, topic, group):
    _topic(broker.bootstrap, topic, 6)
    coop = {"partition.assignment.strategy": "cooperative-sticky"}
    first = Tracked(broker.bootstrap, group, topic, **coop)
    wait_until(lambda: _settled([first], 6, 6), timeout=30)
    second = Tracked(broker.bootstrap, group, topic, **coop)
    wait_until(lambda: _settled([first, second], 6, 3), timeout=40)
    third = Tracked(broker.bootstrap, group, topic, **coop)
    before = {id(m): m.owned() for m in (first, second)}
    revoked_before = {id(m): len(m.revoked) for m in (first, second)}
    wait_until(lambda: _settled([first, second, third], 6, 2), timeout=40)
    for member in (first, second):
        kept = member.owned()
        assert kept <= before[id(member)]  # nothing new, only some given away
        given_away = set().union(*member.revoked[revoked_before[id(member)]:])
        assert given_away == before[id(member)] - kept and not given_away & kept  # incremental revocation only
    # incremental assignment: the new member was handed its partitions, nobody's kept ones were re-assigned
    assert set().union(*third.assigned) == third.owned()
    assert third.revoked == []
    for member in (first, second, third):
        member.consumer.close()
