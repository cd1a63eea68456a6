"""DeleteRecords, OffsetForLeaderEpoch and ListOffsets by timestamp against a real standalone."""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from confluent_kafka import IsolationLevel
from kio.schema.errors import ErrorCode

from nereus.codec.kafka import make, nested
from nereus.codec.kafka.protocol import request_schema

from .raw import RawKafka

TIMEOUT = 20


def setup(broker, topic, timestamps, partitions=1):
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    client.create_topics([NewTopic(topic, partitions)], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i, ts in enumerate(timestamps):
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=ts)
        if i % 3 == 2:
            producer.flush(TIMEOUT)  # several batches
    assert producer.flush(TIMEOUT) == 0
    return client


def watermarks(broker, topic):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT, cached=False)
    finally:
        consumer.close()


def test_delete_records(broker, topic):
    client = setup(broker, topic, [1000 + i for i in range(10)])
    [(_, future)] = client.delete_records([TopicPartition(topic, 0, 4)], request_timeout=TIMEOUT).items()
    assert future.result(TIMEOUT).low_watermark == 4
    assert watermarks(broker, topic) == (4, 10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])  # below the low watermark: reset to it
    try:
        first = None
        while first is None:
            msg = consumer.poll(TIMEOUT)
            if msg is not None and not msg.error():
                first = msg
    finally:
        consumer.close()
    assert (first.offset(), first.value()) == (4, b"v4")

    [(_, future)] = client.delete_records([TopicPartition(topic, 0, 11)], request_timeout=TIMEOUT).items()
    try:
        future.result(TIMEOUT)
        raise AssertionError("deleting beyond the high watermark succeeded")
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    # -1: everything up to the high watermark
    [(_, future)] = client.delete_records([TopicPartition(topic, 0, -1)], request_timeout=TIMEOUT).items()
    assert future.result(TIMEOUT).low_watermark == 10
    assert watermarks(broker, topic) == (10, 10)


def test_offset_for_leader_epoch_answers_the_end_of_the_epoch(broker, topic):
    setup(broker, topic, [1000, 1001, 1002])
    raw = RawKafka(broker.bootstrap)
    try:
        meta = raw.request(3, 9, topics=(make(nested(request_schema(3, 9), "MetadataRequestTopic"), name=topic),),
                           allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                           include_topic_authorized_operations=False)
        epoch = meta.topics[0].partitions[0].leader_epoch
        cls = request_schema(23, 4)

        def ask(leader_epoch):
            part = make(nested(cls, "OffsetForLeaderPartition"), partition=0, current_leader_epoch=epoch,
                        leader_epoch=leader_epoch)
            resp = raw.request(23, 4, replica_id=-1, topics=(
                make(nested(cls, "OffsetForLeaderTopic"), topic=topic, partitions=(part,)),))
            answer = resp.topics[0].partitions[0]
            return answer.error_code, answer.leader_epoch, answer.end_offset

        assert ask(epoch) == (ErrorCode.none, epoch, 3)
        assert ask(epoch + 5) == (ErrorCode.none, -1, -1)  # an epoch the partition never had
        versions = {k.api_key: (k.min_version, k.max_version) for k in raw.request(18, 3, client_software_name="t",
                                                                                client_software_version="1").api_keys}
        assert versions[21] == (0, 2) and versions[23] == (2, 4)
    finally:
        raw.close()


def test_offsets_for_times(broker, topic):
    stamps = [1000, 2000, 3000, 2500, 5000, 6000, 7000, 7000, 9000, 10000]
    setup(broker, topic, stamps)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic})
    try:
        def lookup(ts):
            [tp] = consumer.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=TIMEOUT)
            return tp.offset

        assert lookup(0) == 0
        assert lookup(2400) == 2  # the first record at or after: 3000 at offset 2
        assert lookup(4000) == 4
        assert lookup(7000) == 6
        assert lookup(10000) == 9
        assert lookup(10001) == -1  # none: the end
    finally:
        consumer.close()


def test_list_offsets_max_timestamp_names_the_record_not_its_batch(broker, topic):
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    client.create_topics([NewTopic(topic, 1)], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    for ts in (1_000_000_100, 1_000_000_400, 1_000_000_200):  # one batch; its newest record is in the middle
        producer.produce(topic, b"v", partition=0, timestamp=ts)
    assert producer.flush(TIMEOUT) == 0
    tp = TopicPartition(topic, 0)
    for kwargs in ({}, {"isolation_level": IsolationLevel.READ_COMMITTED}):
        [(_, future)] = client.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=TIMEOUT,
                                            **kwargs).items()
        result = future.result(TIMEOUT)
        assert (result.offset, result.timestamp) == (1, 1_000_000_400)
