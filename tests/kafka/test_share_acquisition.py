"""What a share fetch acquires: whole stored batches (KIP-1206's default mode), and for a group with
share.isolation.level=read_committed only committed transactional records, with confluent-kafka's
ShareConsumer and a transactional producer against a real standalone."""

from __future__ import annotations

import time

from confluent_kafka import AcknowledgeType, KafkaError, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from tests.kafka.test_share_groups import TIMEOUT, joined, poll_until, records, share_consumer
from tests.standalone_process import Standalone


def test_a_batch_larger_than_max_poll_records_comes_whole(broker, topic, group):
    consumer = share_consumer(broker, group, topic, **{"max.poll.records": 5})
    try:
        joined(broker, topic, group, consumer)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
        for i in range(20):
            producer.produce(topic, b"m%d" % i)
        assert producer.flush(TIMEOUT) == 0  # one batch of 20
        first = poll_until(consumer, lambda got: len(got) > 0)
        assert [m.offset() for m in first] == list(range(20))
    finally:
        consumer.close()


def _read_committed(broker, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.GROUP, group)])
    assert next(iter(described.values())).result(TIMEOUT)["share.isolation.level"].value == "read_committed"


def test_a_read_committed_share_group_gets_only_committed_records(broker, topic, group):
    _read_committed(broker, group)
    consumer = share_consumer(broker, group, topic)
    txn = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"{topic}-txn"})
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    try:
        joined(broker, topic, group, consumer)
        txn.init_transactions(TIMEOUT)
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, b"aborted-%d" % i)
        txn.flush(TIMEOUT)
        txn.abort_transaction(TIMEOUT)
        txn.begin_transaction()
        for i in range(2):
            txn.produce(topic, b"committed-%d" % i)
        txn.commit_transaction(TIMEOUT)
        plain.produce(topic, b"plain-0")
        assert plain.flush(TIMEOUT) == 0
        got = poll_until(consumer, lambda got: len(got) >= 3)
        assert sorted(m.value() for m in got) == [b"committed-0", b"committed-1", b"plain-0"]

        # An open transaction holds back what follows it, until it ends.
        txn.begin_transaction()
        txn.produce(topic, b"open-0")
        txn.flush(TIMEOUT)
        plain.produce(topic, b"plain-1")
        assert plain.flush(TIMEOUT) == 0
        held_until = time.monotonic() + 1.5
        while time.monotonic() < held_until:
            assert records(consumer) == []
        txn.commit_transaction(TIMEOUT)
        got = poll_until(consumer, lambda got: len(got) >= 2)
        assert sorted(m.value() for m in got) == [b"open-0", b"plain-1"]
    finally:
        consumer.close()


def test_the_broker_s_lock_duration_comes_from_its_configuration(tmp_path, topic, group):
    """group.share.record.lock.duration.ms in the broker's file: a silent member's records go to another
    member once it passes (Kafka clients' own test suites run their brokers with a 1 s lock)."""
    conf = tmp_path / "broker.conf"
    conf.write_text("group.share.record.lock.duration.ms=1000\ngroup.share.min.record.lock.duration.ms=1000\n")
    server = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--config", str(conf)])
    server.start()
    silent = share_consumer(server, group, topic, explicit=True)
    other = share_consumer(server, group, topic)
    try:
        joined(server, topic, group, silent, other)
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        described = admin.describe_configs([ConfigResource(ConfigResource.Type.GROUP, group)])
        assert next(iter(described.values())).result(TIMEOUT)["share.record.lock.duration.ms"].value == "1000"
        producer = Producer({"bootstrap.servers": server.bootstrap})
        producer.produce(topic, b"held")
        assert producer.flush(TIMEOUT) == 0
        [held] = poll_until(silent, lambda got: len(got) > 0)
        assert held.delivery_count() == 1
        [again] = poll_until(other, lambda got: len(got) > 0)  # once the silent member's lock ran out
        assert (again.offset(), again.value(), again.delivery_count()) == (held.offset(), b"held", 2)
        # The silent member's late acceptance is refused: the record is no longer its own.
        silent.acknowledge(held, AcknowledgeType.ACCEPT)
        errors = [e for e in silent.commit_sync(TIMEOUT).values() if e is not None]
        assert [e.args[0].code() for e in errors] == [KafkaError.INVALID_RECORD_STATE]
        # An implicit acknowledgement (the next poll) that comes after the lock ran out: refused, and
        # the record comes back to the same member, delivered once more. The pause is the lock itself.
        time.sleep(1.5)
        [third] = poll_until(other, lambda got: len(got) > 0)
        assert (third.offset(), third.delivery_count()) == (held.offset(), 3)
    finally:
        silent.close()
        other.close()
        server.stop()


def test_a_topic_created_again_under_its_name_is_assigned_anew(broker, topic, group):
    """Deleted and created again, a topic is another topic (a new id): the group's members are told so
    and get its records from its start, each delivered for the first time."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)
    consumer = share_consumer(broker, group, topic, **{"topic.metadata.refresh.interval.ms": 500})
    producer_conf = {"bootstrap.servers": broker.bootstrap, "topic.metadata.refresh.interval.ms": 500}
    try:
        producer = Producer(producer_conf)
        for i in range(5):
            producer.produce(topic, b"before-%d" % i)
        assert producer.flush(TIMEOUT) == 0
        assert len(poll_until(consumer, lambda got: len(got) >= 5)) == 5
        admin.delete_topics([topic])[topic].result(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while topic in admin.list_topics(timeout=TIMEOUT).topics:
            assert time.monotonic() < deadline
            records(consumer)
        admin.create_topics([NewTopic(topic, 1)])[topic].result(TIMEOUT)
        producer = Producer(producer_conf)
        for i in range(5):
            producer.produce(topic, b"after-%d" % i)
        assert producer.flush(TIMEOUT) == 0
        got = {}

        def fresh():
            for m in records(consumer):
                got.setdefault(m.value(), m.delivery_count())
            return {b"after-%d" % i for i in range(5)} <= set(got)
        deadline = time.monotonic() + TIMEOUT
        while not fresh():
            assert time.monotonic() < deadline, got
        assert not [v for v in got if v.startswith(b"before")]
        assert set(got.values()) == {1}
    finally:
        consumer.close()


def test_a_fetch_takes_no_more_bytes_than_asked_save_its_first_batch(broker, topic, group):
    """ShareFetch's MaxBytes (the consumer's fetch.max.bytes): a batch that would not fit waits for the
    next fetch, unless it is the response's first."""
    consumer = share_consumer(broker, group, topic, **{"fetch.max.bytes": 1500})
    try:
        joined(broker, topic, group, consumer)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        for i in range(3):
            producer.produce(topic, b"%d" % i + b"x" * 1000)
            assert producer.flush(TIMEOUT) == 0  # three batches of about 1 KiB
        sizes = []
        deadline = time.monotonic() + TIMEOUT
        while sum(sizes) < 3:
            assert time.monotonic() < deadline, sizes
            got = records(consumer)
            if got:
                sizes.append(len(got))
        assert sizes == [1, 1, 1]
    finally:
        consumer.close()
