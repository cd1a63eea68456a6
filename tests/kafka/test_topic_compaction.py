"""Kafka's ``cleanup.policy=compact``: keyless records refused, a consumer from offset 0 sees the key view."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.pulsar_admin.conftest import Admin
from tests.standalone_process import Standalone
from tests.waiting import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = Standalone(tmp_path_factory.mktemp("kcompaction") / "data",
                      ["--compaction-interval", "0", "--compaction-monitor-interval", "0"])
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.log.read_text()[-3000:]


def compact(rest: Admin, topic: str) -> None:
    path = f"/persistent/public/default/{topic}"
    deadline = time.monotonic() + 30
    assert rest.put(path + "/compaction")[0] == 204
    while rest.get(path + "/compaction")[1]["status"] != "SUCCESS":
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_consumer_from_offset_zero_sees_the_latest_record_per_key(server):
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"cleanup.policy": "compact"})])[topic].result(15)
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    updates = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(50)] + [(b"k2", None)]
    for key, value in updates:
        producer.produce(topic, value, key)
    assert producer.flush(15) == 0
    errors = []
    producer.produce(topic, b"no key", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors and errors[0] is not None and errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD

    compact(Admin(server.http), topic)
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap, "group.id": uuid.uuid4().hex,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    latest = {key: i for i, (key, _v) in enumerate(updates)}
    assert got == [(i, key, value) for i, (key, value) in enumerate(updates) if latest[key] == i]


def read_from(server, topic: str, offset: int, count: int) -> list[tuple]:
    """``count`` records from ``offset``; an out-of-range offset is an error, not a reset."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap, "group.id": uuid.uuid4().hex,
                                         "auto.offset.reset": "error", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, offset)])
    got = []
    deadline = time.monotonic() + 20
    try:
        while len(got) < count:
            assert time.monotonic() < deadline, got
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append((msg.offset(), msg.key(), msg.value()))
        return got
    finally:
        consumer.close()


def test_retention_releases_the_raw_records_below_the_view_which_still_serves_them(server):
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    # retention.ms does not delete on a compact-only topic (as in Kafka): only the raw
    # records the view replaces are released.
    admin.create_topics([NewTopic(topic, 1, config={"cleanup.policy": "compact", "retention.ms": "1"})])[topic] \
        .result(15)
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    updates = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(40)]
    for key, value in updates:
        producer.produce(topic, value, key)
    assert producer.flush(15) == 0
    rest = Admin(server.http)
    compact(rest, topic)
    after = [(b"k%d" % i, b"after-%d" % i) for i in range(3)]
    for key, value in after:
        producer.produce(topic, value, key)
    assert producer.flush(15) == 0
    updates += after
    view = [(i, k, v) for i, (k, v) in enumerate(updates[:40]) if i >= 35]
    tail = [(40 + i, k, v) for i, (k, v) in enumerate(after)]

    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap, "group.id": uuid.uuid4().hex})
    assert consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10) == (0, 43)
    assert rest.post(f"/persistent/public/default/{topic}/trim", None)[0] == 204
    # The raw records below the horizon (40) are gone; the earliest offset is the view's first.
    assert consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10) == (35, 43)
    consumer.close()
    assert read_from(server, topic, 0, 8) == view + tail
    assert read_from(server, topic, 37, 6) == view[2:] + tail  # below the trimmed start, inside the view
    assert read_from(server, topic, 41, 2) == tail[1:]


def test_records_younger_than_min_compaction_lag_stay_uncompacted(server):
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"cleanup.policy": "compact",
                                                    "min.compaction.lag.ms": "3600000"})])[topic].result(15)
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    updates = [(b"k%d" % (i % 3), b"v%d" % i) for i in range(12)]
    for key, value in updates:
        producer.produce(topic, value, key)
    assert producer.flush(15) == 0
    compact(Admin(server.http), topic)
    assert read_from(server, topic, 0, 12) == [(i, k, v) for i, (k, v) in enumerate(updates)]
    # Without the lag the same records compact.
    admin.incremental_alter_configs([confluent_kafka.admin.ConfigResource(
        "topic", topic, incremental_configs=[confluent_kafka.admin.ConfigEntry(
            "min.compaction.lag.ms", "0", incremental_operation=confluent_kafka.admin.AlterConfigOpType.SET)])
    ])[confluent_kafka.admin.ConfigResource("topic", topic)].result(15)
    deadline = time.monotonic() + 20
    while True:  # configs are cached for a second by each broker
        compact(Admin(server.http), topic)
        got = read_from(server, topic, 0, 3)
        if got[0][0] == 9 or time.monotonic() > deadline:
            break
    assert got == [(i, k, v) for i, (k, v) in enumerate(updates) if i >= 9]


def test_compact_delete_topics_delete_by_retention_in_the_view_too(server):
    topic = f"kc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"cleanup.policy": "compact,delete", "retention.ms": "1"})])[
        topic].result(15)
    producer = confluent_kafka.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    updates = [(b"k%d" % (i % 5), b"v%d" % i) for i in range(20)]
    for key, value in updates:
        producer.produce(topic, value, key)
    assert producer.flush(15) == 0
    rest = Admin(server.http)
    compact(rest, topic)
    producer.produce(topic, b"late", b"k0")
    assert producer.flush(15) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap, "group.id": uuid.uuid4().hex})

    def trimmed() -> bool:  # the late record is past its 1 ms only once that much time has passed
        assert rest.post(f"/persistent/public/default/{topic}/trim", None)[0] == 204
        return consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10)[0] == 21

    # Everything is past retention: the records of the view are deleted too, as Kafka
    # deletes old segments whether they were cleaned or not.
    wait_until(trimmed, "every record past retention trimmed", timeout=15)
    assert consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), timeout=10) == (21, 21)
    consumer.close()
    with pytest.raises(AssertionError, match="OFFSET_OUT_OF_RANGE|out of range|Broker: Offset out of range"):
        read_from(server, topic, 15, 1)
    # a consumer from the earliest offset sees none of the expired keys
    consumer = confluent_kafka.Consumer({"bootstrap.servers": server.bootstrap, "group.id": uuid.uuid4().hex,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    producer.produce(topic, b"fresh", b"k9")
    assert producer.flush(15) == 0
    got = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    assert got == [(21, b"k9", b"fresh")]
    # Pulsar's compacted readers see the same: the expired view records are gone for them too.
    pulsar = pytest.importorskip("pulsar")
    client = pulsar.Client(server.url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader(f"persistent://public/default/{topic}-partition-0", pulsar.MessageId.earliest,
                                      is_read_compacted=True)
        seen = []
        while reader.has_message_available():
            seen.append(reader.read_next(timeout_millis=10000).data())
    finally:
        client.close()
    assert seen == [b"fresh"]

def test_kafka_python_and_aiokafka_read_the_view_then_the_stream_above_it(server):
    """The other Python clients parse the view's batches themselves: offset gaps inside a
    batch (compressed ones too) and the step from the view to the raw records above it."""
    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KTP

    topic = f"kcc-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config={"cleanup.policy": "compact"})])[topic].result(15)
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", compression_type="gzip", linger_ms=20)
    updates = [(b"k%d" % (i * 7 % 11), b"v%d" % i if i % 13 else None) for i in range(300)]
    for key, value in updates:
        producer.send(topic, key=key, value=value)
    producer.flush(20)
    compact(Admin(server.http), topic)
    later = [(b"k1", b"after-1"), (b"k2", b"after-2")]
    for key, value in later:
        producer.send(topic, key=key, value=value)
    producer.flush(20)
    producer.close()
    latest = {key: i for i, (key, _v) in enumerate(updates)}
    expected = [(i, key, value) for i, (key, value) in enumerate(updates) if latest[key] == i]
    expected += [(len(updates) + i, key, value) for i, (key, value) in enumerate(later)]

    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000)
    tp = KTP(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = [(m.offset, m.key, m.value) for _, m in zip(range(len(expected)), consumer)]
    consumer.close()
    assert got == expected

    async def read_with_aiokafka() -> list[tuple]:
        consumer = AIOKafkaConsumer(bootstrap_servers=server.bootstrap, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([ATP(topic, 0)])
            await consumer.seek_to_beginning(ATP(topic, 0))
            out = []
            while len(out) < len(expected):
                m = await asyncio.wait_for(consumer.getone(), 10)
                out.append((m.offset, m.key, m.value))
            return out
        finally:
            await consumer.stop()

    assert asyncio.run(read_with_aiokafka()) == expected
