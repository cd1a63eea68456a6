"""Unbatched produce (linger.ms=0, acks=all): every request is acknowledged, in order.

The WAL flushes an idle writer at once and carries whatever arrived during a flush in
the next one; a connection keeps starting Produce requests while earlier ones wait for
their flush. Nothing here measures time (``bench/kafka_e2e.py --unbatched-only`` does).
"""

from __future__ import annotations

import datetime
import struct
import subprocess
import sys
import textwrap

from confluent_kafka import Producer
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from nereus.codec.kafka import nested
from nereus.codec.kafka.records import Record, build_batch

from .raw import RawKafka
from .test_clients import _consume_confluent


def test_sequential_linger_zero_round_trips_are_each_acknowledged(broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    offsets = []
    for i in range(300):  # each waits for the one before: the broker has nothing else to flush with it
        producer.produce(topic, value=b"m%d" % i, partition=0,
                         on_delivery=lambda err, msg: offsets.append(msg.offset() if err is None else err))
        assert producer.flush(30) == 0
    assert offsets == list(range(300))
    assert [m.value() for m in _consume_confluent(broker.bootstrap, topic, 300)] == [b"m%d" % i for i in range(300)]


def test_one_message_requests_pipelined_on_one_connection_keep_their_order(broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                         "batch.num.messages": 1, "enable.idempotence": False})
    delivered = []
    for i in range(3000):  # no wait between them: many one-message requests in flight at once
        producer.produce(topic, value=b"p%d" % i, partition=0,
                         on_delivery=lambda err, msg: delivered.append((msg.offset(), msg.value()) if err is None
                                                                      else err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert sorted(delivered) == [(i, b"p%d" % i) for i in range(3000)]


def test_a_connection_starts_more_produce_requests_than_other_requests_in_flight(broker, topic):
    # 100 Produce requests written before any answer is read (more than the 32 other requests
    # a connection starts at once): every one is answered, in request order, with its offset.
    raw = RawKafka(broker.bootstrap)
    try:
        raw.metadata([topic])  # auto-creates the topic
        version = 9
        cls = load_request_schema(0, version)
        frames = []
        for i in range(100):
            pdata = nested(cls, "PartitionProduceData")(index=0, records=build_batch(
                [Record(0, 1_700_000_000_000 + i, None, b"r%d" % i)]))
            tdata = nested(cls, "TopicProduceData")(name=topic, partition_data=(pdata,))
            frames.append(raw.frame(0, version, transactional_id=None, acks=-1,
                                    timeout=datetime.timedelta(seconds=30), topic_data=(tdata,)))
        first = raw.corr - 99
        raw.send_raw(b"".join(frames))
        resp_cls = load_response_schema(0, version)
        for i in range(100):
            frame = raw.recv_frame()
            assert struct.unpack_from(">i", frame, 0)[0] == first + i
            part = entity_reader(resp_cls)(frame, 4 + 1)[0].responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (0, i)
    finally:
        raw.close()


def _delete_elsewhere(broker, topic: str) -> None:
    """Delete the Kafka topic's stream and partitioned record from another process (another broker's
    DeleteTopics): this broker still holds the partition's append session when it happens."""
    script = textwrap.dedent(f"""
        import asyncio
        from nereus.ledger.naming import TopicName
        from nereus.meta import connect
        from nereus.objstore import open_object_store
        from nereus.storage import StreamStorage
        from nereus.topics import partitioned_key
        async def main():
            meta = connect("oxia://127.0.0.1:{broker.ports['oxia']}")
            objects = open_object_store({(broker.data_dir / 'objects').resolve().as_uri()!r})
            storage = StreamStorage(meta, objects, node_id="other-broker")
            name = TopicName("persistent", "public", "default", {topic!r})
            await storage.delete_stream(str(name.partition(0)))
            await meta.delete(partitioned_key(name))
            await storage.close(); await meta.close(); await objects.close()
        asyncio.run(main())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


def test_a_partition_deleted_elsewhere_takes_no_more_writes(broker, topic):
    # Produce requests of a partition this broker writes skip the metadata reads of the topic's
    # existence; the deletion fences the broker's session, so nothing is acknowledged into the
    # deleted stream: what is acknowledged after it is in the topic as re-created.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                         "retry.backoff.ms": 50, "message.timeout.ms": 30_000})
    results = []

    def report(err, msg):
        results.append((msg.value(), err))

    producer.produce(topic, value=b"before", partition=0, on_delivery=report)
    assert producer.flush(30) == 0 and results == [(b"before", None)]
    _delete_elsewhere(broker, topic)
    producer.produce(topic, value=b"after", partition=0, on_delivery=report)
    assert producer.flush(60) == 0 and results[1] == (b"after", None)
    assert [m.value() for m in _consume_confluent(broker.bootstrap, topic, 1)] == [b"after"]
