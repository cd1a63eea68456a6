"""aiokafka's and kafka-python's transactional producers and read_committed consumers."""

from __future__ import annotations

import asyncio
import time
import uuid

from tests.kafka.test_transactions import _create, consume


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_aiokafka_transactions(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic, group = _name("aio"), _name("aiog")
    _create(broker, topic, partitions=2)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_name("tid"))
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(4):
                    await producer.send(topic, f"commit-{i}".encode(), partition=i % 2)
                await producer.send_offsets_to_transaction({_tp(topic, 0): 3}, group)
            await producer.begin_transaction()
            for i in range(4):
                await producer.send(topic, f"abort-{i}".encode(), partition=i % 2)
            await producer.abort_transaction()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                    isolation_level="read_committed", auto_offset_reset="earliest")
        await consumer.start()
        try:
            return await consumer.committed(_tp(topic, 0))
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == 3  # the transaction's offset commit
    seen = consume(broker, [topic], "read_committed", until=4, settle=0.5)
    assert sorted(v for *_, v in seen) == [f"commit-{i}" for i in range(4)]
    everything = consume(broker, [topic], "read_uncommitted", until=8, settle=0.5)
    assert len(everything) == 8


def _tp(topic: str, partition: int):
    from aiokafka.structs import TopicPartition

    return TopicPartition(topic, partition)


def test_aiokafka_read_committed_consumer(broker):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _name("aiorc")
    _create(broker, topic, partitions=1)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_name("tid"))
        await producer.start()
        try:
            for label, commit in (("a", False), ("b", True)):
                await producer.begin_transaction()
                for i in range(3):
                    await producer.send_and_wait(topic, f"{label}-{i}".encode(), partition=0)
                await (producer.commit_transaction() if commit else producer.abort_transaction())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            while len(got) < 3:
                batch = await consumer.getmany(timeout_ms=1000)
                got += [m.value.decode() for msgs in batch.values() for m in msgs]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(asyncio.wait_for(run(), 60)) == ["b-0", "b-1", "b-2"]


def test_kafka_python_transactions(broker):
    from kafka import KafkaConsumer, KafkaProducer

    topic = _name("kp")
    _create(broker, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=_name("tid"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(4):
            producer.send(topic, f"commit-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(4):
            producer.send(topic, f"abort-{i}".encode(), partition=i % 2)
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest")
    values: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < 4 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value.decode() for r in records]
        for records in consumer.poll(timeout_ms=500).values():  # nothing more comes (the aborted ones)
            values += [r.value.decode() for r in records]
    finally:
        consumer.close()
    assert sorted(values) == [f"commit-{i}" for i in range(4)]
