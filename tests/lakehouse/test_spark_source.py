"""The ``nereus`` Spark data source against a real standalone: Pulsar and Kafka producers,
then batch reads in a local Spark session (one per module)."""

from __future__ import annotations

import threading

import pytest

pyspark = pytest.importorskip("pyspark")
pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")

from tests.standalone_process import Standalone  # noqa: E402
from tests.standalone_process import admin  # noqa: E402

PULSAR_TOPIC = "persistent://public/default/spark-pulsar"
KAFKA_TOPIC = "spark-kafka"


def _source(spark, node: Standalone, topic: str, **options: str):
    reader = (spark.read.format("nereus")
              .option("metadata", f"oxia://127.0.0.1:{node.ports['oxia']}")
              .option("objects", (node.data_dir / "objects").resolve().as_uri())
              .option("topic", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.fixture(scope="module")
def pulsar_records(standalone):
    """offset -> (key, value, properties) of everything the Pulsar producers got acked."""
    client = pulsar.Client(standalone.url)
    expected: dict[int, tuple] = {}
    lock = threading.Lock()
    try:
        plain = client.create_producer(PULSAR_TOPIC, producer_name="plain", batching_enabled=False)
        for i in range(20):
            props = {"i": str(i), "kind": "plain"}
            key = f"k{i % 3}" if i % 2 == 0 else None
            kwargs = {"partition_key": key} if key else {}
            mid = plain.send(f"plain-{i}".encode(), properties=props, **kwargs)
            expected[mid.entry_id() + max(mid.batch_index(), 0)] = (key and key.encode(), f"plain-{i}".encode(), props)
        batched = client.create_producer(PULSAR_TOPIC, producer_name="batched", batching_enabled=True,
                                         batching_max_messages=25, batching_max_publish_delay_ms=50)
        errors = []

        def sent(res, mid, key, value, props):
            if res != pulsar.Result.Ok:
                errors.append(res)
                return
            with lock:
                expected[mid.entry_id() + max(mid.batch_index(), 0)] = (key and key.encode(), value, props)

        for i in range(200):
            props = {"i": str(i), "kind": "batched"}
            key = f"b{i % 5}"
            value = f"batched-{i}".encode()
            batched.send_async(value, lambda r, m, k=key, v=value, p=props: sent(r, m, k, v, p),
                               properties=props, partition_key=key)
        batched.flush()
        assert not errors
        plain.close()
        batched.close()
    finally:
        client.close()
    assert len(expected) == 220
    return expected


@pytest.fixture(scope="module")
def kafka_records(standalone):
    producer = confluent_kafka.Producer({"bootstrap.servers": standalone.bootstrap, "linger.ms": 20,
                                         "enable.idempotence": True})
    expected: dict[int, tuple] = {}
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            i = int(msg.value().split(b"-")[1])  # delivery reports carry no headers
            expected[msg.offset()] = (msg.key(), msg.value(), {"i": str(i), "src": "kafka"})

    for i in range(150):
        key = None if i % 10 == 0 else f"kk{i % 7}".encode()
        producer.produce(KAFKA_TOPIC, value=f"kafka-{i}".encode(), key=key,
                         headers=[("i", str(i).encode()), ("src", b"kafka")], on_delivery=delivered)
    assert producer.flush(180) == 0  # bounds a hang only
    assert not errors
    assert len(expected) == 150
    return expected


def _collect(df) -> dict[int, tuple]:
    out: dict[int, tuple] = {}
    for row in df.collect():
        assert row.offset not in out, f"offset {row.offset} read twice"
        out[row.offset] = row
    return out


def test_pulsar_topic(spark, standalone, pulsar_records):
    df = _source(spark, standalone, PULSAR_TOPIC, recordsPerPartition="64")
    assert df.rdd.getNumPartitions() >= 4  # 220 offsets in chunks of 64
    got = _collect(df)
    assert set(got) == set(pulsar_records)
    for offset, (key, value, props) in pulsar_records.items():
        row = got[offset]
        assert (row.topic, row.partition) == (PULSAR_TOPIC, -1)
        assert (row.key, row.value, row.properties) == (key, value, props)
        assert row.producer_name == props["kind"]
        assert row.publish_time is not None


def test_short_name_and_offset_range(spark, standalone, pulsar_records):
    df = _source(spark, standalone, "spark-pulsar", startingOffset="10", endingOffset='{"-1": 100}',
                 recordsPerPartition="7")
    got = _collect(df)
    assert set(got) == {o for o in pulsar_records if 10 <= o < 100}
    assert df.filter("offset >= 50").count() == len([o for o in pulsar_records if 50 <= o < 100])


def test_kafka_topic(spark, standalone, kafka_records):
    df = _source(spark, standalone, KAFKA_TOPIC, recordsPerPartition="40")
    got = _collect(df)
    assert set(got) == set(kafka_records)
    for offset, (key, value, headers) in kafka_records.items():
        row = got[offset]
        assert (row.topic, row.partition) == (f"persistent://public/default/{KAFKA_TOPIC}", 0)
        assert (row.key, row.value, row.properties) == (key, value, headers)
        assert row.producer_name == "kafka"
        assert row.event_time is not None


def test_empty_range_and_empty_topic(spark, standalone, kafka_records):
    assert _source(spark, standalone, KAFKA_TOPIC, startingOffset="latest", endingOffset="5").count() == 0
    # a partitioned topic exists from its creation, before any partition has a stream
    admin(standalone, "PUT", "/persistent/public/default/spark-empty/partitions", 2)
    assert _source(spark, standalone, "spark-empty").count() == 0


def test_a_topic_that_does_not_exist_is_an_error(spark, standalone):
    with pytest.raises(Exception, match="persistent://public/default/never-written does not exist"):
        _source(spark, standalone, "never-written").count()
