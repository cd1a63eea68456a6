"""Lookups, partitioned topics, namespace listing and metrics."""

from __future__ import annotations

import asyncio
import re
import uuid

from nereus.ledger.naming import TopicName
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.pulsar.server import PulsarService, create_partitioned_topic
from nereus.storage import StorageOptions, StreamStorage, WalOptions

from .conftest import receive_all


async def test_partitioned_topic_from_metadata(make_client, pulsar):
    # In-process broker: partitioned topics are declared in metadata (no admin API yet).
    engine = open_engine(None, shards=2)
    meta = engine.client(namespace="default")
    objects = open_object_store("memory://")
    storage = StreamStorage(meta, objects, options=StorageOptions(wal=WalOptions(flush_interval=0.002)))
    service = PulsarService(storage, meta, port=0)
    await service.start()
    base = TopicName.parse("persistent://public/default/parted")
    assert await create_partitioned_topic(meta, base, 3)
    try:
        def scenario():
            client = make_client(service.service_url)
            assert client.get_topic_partitions(str(base)) == [str(base.partition(i)) for i in range(3)]
            consumer = client.subscribe(str(base), "s", initial_position=pulsar.InitialPosition.Earliest)
            producer = client.create_producer(str(base), batching_enabled=False)
            for i in range(30):
                producer.send(f"{i}".encode(), partition_key=f"k{i}")
            got = receive_all(consumer, 30)
            return sorted(int(m.data()) for m in got), {m.topic_name() for m in got}

        values, topics = await asyncio.to_thread(scenario)
        assert values == list(range(30))
        assert len(topics) > 1, "messages went to several partitions"
        assert sorted(await storage.list_streams()) == [str(base.partition(i)) for i in range(3)]
    finally:
        await service.stop()
        await storage.close()
        await meta.close()
        await objects.close()
        await engine.close()


def test_non_partitioned_metadata_and_pattern_subscription(standalone, client, pulsar):
    prefix = f"pat-{uuid.uuid4().hex[:6]}"
    names = [f"persistent://public/default/{prefix}-{i}" for i in range(2)]
    for name in names:
        client.create_producer(name).close()  # auto-creates the topic
        assert client.get_topic_partitions(name) == [name]
    consumer = client.subscribe(re.compile(f"persistent://public/default/{prefix}-.*"), "pat",
                                initial_position=pulsar.InitialPosition.Earliest)
    for name in names:
        producer = client.create_producer(name, batching_enabled=False)
        producer.send(name.encode())
    got = {m.data().decode() for m in receive_all(consumer, 2)}
    assert got == set(names)


def test_metrics_are_pulsar_like(standalone, client, topic, pulsar):
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "metered", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(3):
        producer.send(b"x")
    receive_all(consumer, 3)
    text = standalone.metrics()
    assert f'pulsar_in_messages_total{{topic="{topic}"}} 3.0' in text
    assert f'pulsar_out_messages_total{{subscription="metered",topic="{topic}"}} 3.0' in text
    assert f'pulsar_subscriptions_count{{topic="{topic}"}} 1.0' in text
    assert f'pulsar_producers_count{{topic="{topic}"}} 1.0' in text
    assert f'pulsar_consumers_count{{topic="{topic}"}} 1.0' in text
    assert f'pulsar_msg_backlog{{topic="{topic}"}} 3.0' in text
