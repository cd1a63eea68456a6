"""Kafka's ``cleanup.policy=compact``: keyless records refused, a consumer from offset 0 sees the key view."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.pulsar_admin.conftest import Admin
from tests.standalone_process import Standalone

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
