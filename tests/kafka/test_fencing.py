"""Kafka clients when the stream's append session moves: reads never take it, produce retries."""

from __future__ import annotations

import asyncio
import json
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from nereus.meta import connect
from nereus.storage import records

from tests.pulsar_broker.test_edges import take_over_stream

from .test_clients import _consume_confluent


def _session_token(broker, stream_name: str) -> int:
    async def read() -> int:
        meta = connect(f"oxia://127.0.0.1:{broker.ports['oxia']}")
        try:
            rec = await meta.get(records.name_key(stream_name))
            stream_id = json.loads(rec.value)["id"]
            session = await meta.get(records.session_key(stream_id),
                                     partition_key=records.stream_partition(stream_id))
            return json.loads(session.value)["token"] if session is not None else 0
        finally:
            await meta.close()

    return asyncio.run(read())


def test_a_fetch_never_takes_the_append_session(broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(10):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(20) == 0
    stream = f"persistent://public/default/{topic}-partition-0"
    take_over_stream(broker, stream)  # another broker writes it now
    token = _session_token(broker, stream)
    assert len(_consume_confluent(broker.bootstrap, topic, 10)) == 10
    assert _session_token(broker, stream) == token  # reading did not fence the writer


def test_produce_through_a_takeover_stores_each_message_once(broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 2, "retries": 1000, "retry.backoff.ms": 50})
    stream = f"persistent://public/default/{topic}-partition-0"
    delivered, failed = [], []

    def report(err, msg):
        (failed if err is not None else delivered).append(msg.value())

    for i in range(600):
        producer.produce(topic, value=b"%d" % i, on_delivery=report)
        if i in (200, 400):
            producer.flush(20)
            take_over_stream(broker, stream)  # the broker's session is fenced under the producer
        producer.poll(0)
    assert producer.flush(60) == 0
    assert not failed and len(delivered) == 600
    values = [m.value() for m in _consume_confluent(broker.bootstrap, topic, 600)]
    assert values == [b"%d" % i for i in range(600)]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{time.monotonic_ns()}"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=20)
    consumer.close()
    assert (low, high) == (0, 600)  # nothing stored twice
