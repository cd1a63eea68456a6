"""Kafka share groups (KIP-932) with confluent-kafka's ShareConsumer against a real standalone.

A share group is a durable subscription named after the group on each partition of its
topics: the Pulsar admin shows it, with its backlog shrinking as records are accepted.
"""

from __future__ import annotations

import json
import time
import urllib.request

import pulsar
import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.kafka.conftest import wait_until
from tests.kafka.raw import RawKafka

TIMEOUT = 20


def set_broker_configs(broker, **configs) -> None:
    """Set (value) or remove (None) dynamic broker configs, names with dots as underscores."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    entries = [ConfigEntry(name.replace("_", "."), value,
                           incremental_operation=AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE)
               for name, value in configs.items()]
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=entries)
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)


def subscription_stats(broker, topic: str, group: str) -> dict | None:
    url = f"{broker.http}/admin/v2/persistent/public/default/{topic}/partitioned-stats"
    with urllib.request.urlopen(url, timeout=TIMEOUT) as resp:
        return json.loads(resp.read())["subscriptions"].get(group)


def produce(broker, topic: str, count: int, prefix: str = "m", per_batch: int | None = None) -> None:
    """``count`` records; ``per_batch``: flushed every that many, so each batch holds that many."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, f"{prefix}{i}".encode())
        producer.poll(0)
        if per_batch and (i + 1) % per_batch == 0:
            assert producer.flush(TIMEOUT) == 0
    assert producer.flush(TIMEOUT) == 0


def share_consumer(broker, group: str, topic: str, explicit: bool = False, **configs) -> ShareConsumer:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    if topic not in admin.list_topics(timeout=TIMEOUT).topics:
        admin.create_topics([NewTopic(topic, 1)])[topic].result(TIMEOUT)
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit" if explicit else "implicit", **configs})
    consumer.subscribe([topic])
    return consumer


def records(consumer: ShareConsumer, timeout: float = 0.2) -> list:
    out = []
    for m in consumer.poll(timeout):
        assert m.error() is None, m.error()
        out.append(m)
    return out


def joined(broker, topic: str, group: str, *consumers) -> None:
    """Poll until the share group's subscription exists (share groups start at the end, as Kafka's)."""
    def ready():
        for c in consumers:
            assert records(c, 0.1) == []
        return subscription_stats(broker, topic, group) is not None
    wait_until(ready, timeout=TIMEOUT)


def poll_until(consumer: ShareConsumer, wanted, timeout: float = TIMEOUT) -> list:
    """Poll ``consumer`` until ``wanted(all records so far)``; returns the records."""
    got: list = []
    deadline = time.monotonic() + timeout
    while not wanted(got):
        assert time.monotonic() < deadline, f"got only {[(m.offset(), m.delivery_count()) for m in got]}"
        got += records(consumer)
    return got


@pytest.fixture
def settings(broker):
    """Broker configs a test changes, put back afterwards."""
    changed = set()

    def apply(**configs):
        changed.update(configs)
        set_broker_configs(broker, **configs)

    yield apply
    if changed:
        set_broker_configs(broker, **{name: None for name in changed})


def test_two_consumers_share_one_partition(broker, topic, group):
    a, b = (share_consumer(broker, group, topic, **{"max.poll.records": 5}) for _ in range(2))
    try:
        joined(broker, topic, group, a, b)
        produce(broker, topic, 30, per_batch=5)  # whole batches are acquired: several, so both get some
        first_a = poll_until(a, lambda got: len(got) >= 1)
        # a holds its records (locked, not yet acknowledged): b gets others
        first_b = poll_until(b, lambda got: len(got) >= 1)
        assert not {m.offset() for m in first_a} & {m.offset() for m in first_b}
        seen = first_a + first_b
        deadline = time.monotonic() + TIMEOUT
        while len(seen) < 30:
            assert time.monotonic() < deadline, sorted(m.offset() for m in seen)
            seen += records(a) + records(b)
        offsets = [m.offset() for m in seen]
        assert sorted(offsets) == list(range(30))  # everything, nothing twice
        assert {m.value() for m in seen} == {f"m{i}".encode() for i in range(30)}
        assert {m.delivery_count() for m in seen} == {1}
        for c in (a, b):
            c.commit_sync(TIMEOUT)
        wait_until(lambda: subscription_stats(broker, topic, group)["msgBacklog"] == 0, timeout=TIMEOUT)
    finally:
        a.close()
        b.close()


def test_members_of_a_group_are_given_different_partitions(broker, topic, group):
    """The simple assignor spreads four partitions over two members: a poll of one member never
    takes the other's partitions, so both consume (as a Kafka share group does)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 4)])[topic].result(TIMEOUT)
    a, b = (share_consumer(broker, group, topic) for _ in range(2))
    raw = RawKafka(broker.bootstrap)
    try:
        joined(broker, topic, group, a, b)

        def settled() -> bool:  # both members heartbeated at the group epoch: each knows its share
            for c in (a, b):
                assert records(c, 0.1) == []
            (described,) = raw.request(77, 1, group_ids=(group,), include_authorized_operations=False).groups
            return len(described.members) == 2 and all(
                m.member_epoch == described.group_epoch and len(m.assignment.topic_partitions[0].partitions) == 2
                for m in described.members)

        wait_until(settled, timeout=TIMEOUT)
        produce(broker, topic, 200)
        seen: dict = {"a": [], "b": []}
        deadline = time.monotonic() + TIMEOUT
        while len(seen["a"]) + len(seen["b"]) < 200:
            assert time.monotonic() < deadline, {k: len(v) for k, v in seen.items()}
            seen["a"] += records(a)
            seen["b"] += records(b)
        partitions = {k: {m.partition() for m in v} for k, v in seen.items()}
        assert len(partitions["a"]) == len(partitions["b"]) == 2 and not partitions["a"] & partitions["b"]
        everything = [(m.partition(), m.offset()) for v in seen.values() for m in v]
        assert len(set(everything)) == len(everything) == 200
    finally:
        raw.close()
        a.close()
        b.close()


def test_backlog_shrinks_as_records_are_accepted(broker, topic, group):
    c = share_consumer(broker, group, topic, explicit=True)
    try:
        joined(broker, topic, group, c)
        produce(broker, topic, 6)
        wait_until(lambda: subscription_stats(broker, topic, group)["msgBacklog"] == 6, timeout=TIMEOUT)
        got = poll_until(c, lambda got: len(got) >= 6)
        for m in got[:4]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(TIMEOUT)
        assert subscription_stats(broker, topic, group)["msgBacklog"] == 2
        for m in got[4:]:
            c.acknowledge(m, AcknowledgeType.ACCEPT)
        c.commit_sync(TIMEOUT)
        assert subscription_stats(broker, topic, group)["msgBacklog"] == 0
    finally:
        c.close()


def test_released_records_go_to_the_other_consumer(broker, topic, group):
    # b joins once a holds the records: a member's client may fetch (acquire) before the test polls it.
    a = share_consumer(broker, group, topic, explicit=True)
    b = None
    try:
        joined(broker, topic, group, a)
        produce(broker, topic, 5)
        got = poll_until(a, lambda got: len(got) >= 5)
        assert {m.delivery_count() for m in got} == {1}
        b = share_consumer(broker, group, topic, explicit=True)
        joined(broker, topic, group, b)  # nothing for b: a holds every record
        for m in got:
            a.acknowledge(m, AcknowledgeType.RELEASE)
        a.commit_sync(TIMEOUT)
        again = poll_until(b, lambda got: len(got) >= 5)
        assert sorted(m.offset() for m in again) == sorted(m.offset() for m in got)
        assert {m.delivery_count() for m in again} == {2}
        for m in again:
            b.acknowledge(m, AcknowledgeType.ACCEPT)
        b.commit_sync(TIMEOUT)
        assert subscription_stats(broker, topic, group)["msgBacklog"] == 0
    finally:
        a.close()
        if b is not None:
            b.close()


def test_records_of_a_closed_consumer_are_redelivered(broker, topic, group):
    # b joins once a holds the records: b's client may fetch (and so acquire) them first otherwise
    a = share_consumer(broker, group, topic, explicit=True)
    b = None
    try:
        joined(broker, topic, group, a)
        produce(broker, topic, 3)
        got = poll_until(a, lambda got: len(got) >= 3)
        b = share_consumer(broker, group, topic)
    finally:
        a.close()  # nothing acknowledged: its share session closes and releases them
    assert b is not None
    try:
        again = poll_until(b, lambda got: len(got) >= 3)
        assert sorted(m.offset() for m in again) == sorted(m.offset() for m in got)
        assert {m.delivery_count() for m in again} == {2}
    finally:
        b.close()


def test_rejected_records_are_never_redelivered(broker, topic, group):
    # b joins only once a has acknowledged: a member's client may fetch (and so acquire) records
    # before the test polls it, and the records a must see could sit acquired by b until its lock ends.
    a = share_consumer(broker, group, topic, explicit=True)
    b = None
    try:
        joined(broker, topic, group, a)
        produce(broker, topic, 4)
        got = poll_until(a, lambda got: len(got) >= 4)
        rejected = {m.offset() for m in got[:2]}
        for m in got[:2]:
            a.acknowledge(m, AcknowledgeType.REJECT)
        for m in got[2:]:
            a.acknowledge(m, AcknowledgeType.RELEASE)
        a.commit_sync(TIMEOUT)
        a.close()
        b = share_consumer(broker, group, topic)
        produce(broker, topic, 1, prefix="last")
        # b gets the released records and the new one, and never a rejected one
        again = poll_until(b, lambda got: any(m.value() == b"last0" for m in got) and len(got) >= 3)
        assert not rejected & {m.offset() for m in again}
        b.commit_sync(TIMEOUT)
        wait_until(lambda: subscription_stats(broker, topic, group)["msgBacklog"] == 0, timeout=TIMEOUT)
    finally:
        if b is not None:
            b.close()


def test_delivery_limit_archives_a_record(broker, topic, group, settings):
    settings(group_share_delivery_count_limit="2")
    c = share_consumer(broker, group, topic, explicit=True)
    try:
        joined(broker, topic, group, c)
        produce(broker, topic, 1)
        for attempt in (1, 2):
            got = poll_until(c, lambda got: len(got) >= 1)
            assert [m.delivery_count() for m in got] == [attempt]
            c.acknowledge(got[0], AcknowledgeType.RELEASE)
            c.commit_sync(TIMEOUT)
        # the second release reached the limit: archived, out of the backlog
        wait_until(lambda: subscription_stats(broker, topic, group)["msgBacklog"] == 0, timeout=TIMEOUT)
        produce(broker, topic, 1, prefix="next")
        got = poll_until(c, lambda got: len(got) >= 1)
        assert [m.value() for m in got] == [b"next0"]
        c.acknowledge(got[0], AcknowledgeType.ACCEPT)
    finally:
        c.close()


def test_expired_lock_redelivers(broker, topic, group, settings):
    settings(group_share_record_lock_duration_ms="500")
    a = share_consumer(broker, group, topic, explicit=True)
    b = share_consumer(broker, group, topic)
    try:
        joined(broker, topic, group, a, b)
        produce(broker, topic, 2)
        got = poll_until(a, lambda got: len(got) >= 2)
        # a neither acknowledges nor polls again: once its lock runs out, b gets them
        again = poll_until(b, lambda got: len(got) >= 2)
        first = {m.offset(): m.delivery_count() for m in got}
        second = {m.offset(): m.delivery_count() for m in again}
        assert first.keys() == second.keys()
        # Each record is delivered once to each, the second time as a redelivery. Usually a has
        # it first; b's fetch in flight when the records came may have acquired them first, and
        # a then gets them once b's lock runs out, so the order between the two is not fixed.
        assert all(sorted((first[o], second[o])) == [1, 2] for o in first), (first, second)
    finally:
        b.close()
        a.close()


def test_group_configs_start_at_the_earliest_record(broker, topic, group):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.GROUP, group)])
    configs = next(iter(described.values())).result(TIMEOUT)
    assert configs["share.auto.offset.reset"].value == "earliest"
    assert configs["share.record.lock.duration.ms"].value == "30000"
    bad = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "sometime", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="sometime"):
        admin.incremental_alter_configs([bad], request_timeout=TIMEOUT)[bad].result(TIMEOUT)

    produce(broker, topic, 3)  # before the group exists: read all the same
    c = share_consumer(broker, group, topic)
    try:
        got = poll_until(c, lambda got: len(got) >= 3)
        assert sorted(m.offset() for m in got) == [0, 1, 2]
    finally:
        c.close()


def test_a_pulsar_consumer_of_the_subscription_gets_what_the_share_group_left(broker, topic, group):
    c = share_consumer(broker, group, topic, explicit=True)
    try:
        joined(broker, topic, group, c)
        produce(broker, topic, 4)
        got = sorted(poll_until(c, lambda got: len(got) >= 4), key=lambda m: m.offset())
        for m in got:
            c.acknowledge(m, AcknowledgeType.ACCEPT if m.offset() % 2 == 0 else AcknowledgeType.RELEASE)
        c.commit_sync(TIMEOUT)
    finally:
        c.close()
    client = pulsar.Client(broker.pulsar_url, operation_timeout_seconds=10, io_threads=1)
    try:
        # the accepted records are individual acks on the subscription's cursor (batch-index
        # acks: a Kafka batch may hold several of them)
        consumer = client.subscribe(f"persistent://public/default/{topic}", group,
                                    consumer_type=pulsar.ConsumerType.Shared, batch_index_ack_enabled=True)
        values = set()
        for _ in range(2):
            msg = consumer.receive(timeout_millis=TIMEOUT * 1000)
            values.add(msg.value())
            consumer.acknowledge(msg)
        assert values == {b"m1", b"m3"}
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=300)
        consumer.close()
    finally:
        client.close()
    wait_until(lambda: subscription_stats(broker, topic, group)["msgBacklog"] == 0, timeout=TIMEOUT)
