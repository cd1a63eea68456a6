"""Kafka client quotas: AlterClientQuotas / DescribeClientQuotas, and produce/fetch byte rates throttling clients."""

from __future__ import annotations

import datetime
import uuid

from confluent_kafka import Consumer, Producer
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from nereus.codec.kafka import make, nested
from nereus.codec.kafka.records import Record, build_batch
from tests.kafka.raw import RawKafka

EXACT, DEFAULT, ANY = 0, 1, 2


def _alter(raw: RawKafka, entity: dict, ops: dict, validate_only: bool = False):
    cls = load_request_schema(49, 1)
    entry = make(nested(cls, "EntryData"),
                 entity=tuple(make(nested(cls, "EntityData"), entity_type=t, entity_name=n) for t, n in entity.items()),
                 ops=tuple(make(nested(cls, "OpData"), key=k, value=v or 0.0, remove=v is None) for k, v in ops.items()))
    return raw.request(49, 1, entries=(entry,), validate_only=validate_only).entries[0]


def _describe(raw: RawKafka, components: list[tuple[str, int, str | None]], strict: bool = False):
    cls = load_request_schema(48, 1)
    return raw.request(48, 1, strict=strict, components=tuple(
        make(nested(cls, "ComponentData"), entity_type=t, match_type=m, match=n) for t, m, n in components))


def _found(response) -> dict:
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def test_alter_and_describe_client_quotas(broker):
    raw = RawKafka(broker.bootstrap)
    client = f"c-{uuid.uuid4().hex[:6]}"
    assert _alter(raw, {"client-id": client}, {"producer_byte_rate": 1024.0}).error_code == ErrorCode.none
    assert _alter(raw, {"user": "alice", "client-id": client}, {"consumer_byte_rate": 2048.0}).error_code == 0
    assert _alter(raw, {"user": None}, {"request_percentage": 50.0}).error_code == 0
    assert _alter(raw, {"client-id": client}, {"consumer_byte_rate": 9.0}, validate_only=True).error_code == 0

    exact = _describe(raw, [("client-id", EXACT, client)])
    assert exact.error_code == ErrorCode.none
    assert _found(exact) == {(("client-id", client),): {"producer_byte_rate": 1024.0},
                             (("client-id", client), ("user", "alice")): {"consumer_byte_rate": 2048.0}}
    strict = _describe(raw, [("client-id", EXACT, client)], strict=True)
    assert _found(strict) == {(("client-id", client),): {"producer_byte_rate": 1024.0}}
    assert _found(_describe(raw, [("user", DEFAULT, None)])) == {(("user", None),): {"request_percentage": 50.0}}
    assert (("user", None),) not in _found(_describe(raw, [("user", ANY, None)]))

    bad_key = _alter(raw, {"client-id": client}, {"connection_creation_rate": 5.0})
    assert bad_key.error_code == ErrorCode.invalid_request and "connection_creation_rate" in bad_key.error_message
    assert _alter(raw, {"group": "x"}, {"producer_byte_rate": 1.0}).error_code == ErrorCode.invalid_request
    assert _alter(raw, {"client-id": client}, {"producer_byte_rate": -1.0}).error_code == ErrorCode.invalid_request
    assert _describe(raw, [("nope", ANY, None)]).error_code == ErrorCode.invalid_request

    for entity in ({"client-id": client}, {"user": "alice", "client-id": client}, {"user": None}):
        assert _alter(raw, entity, {k: None for k in ("producer_byte_rate", "consumer_byte_rate",
                                                      "request_percentage")}).error_code == 0
    assert _found(_describe(raw, [("client-id", EXACT, client)])) == {}
    raw.close()


def test_raw_produce_over_its_quota_is_answered_with_a_throttle_time(broker):
    raw = RawKafka(broker.bootstrap)  # client id "raw"
    topic = f"q-{uuid.uuid4().hex[:6]}"
    assert raw.metadata([topic]).topics[0].error_code == 0
    assert _alter(raw, {"client-id": "raw"}, {"producer_byte_rate": 1000.0}).error_code == 0
    batch = build_batch([Record(i, 1_700_000_000_000, b"k", b"v" * 1000) for i in range(3)])
    cls = load_request_schema(0, 9)
    pdata = nested(cls, "PartitionProduceData")(index=0, records=batch)
    response = raw.request(0, 9, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                           topic_data=(nested(cls, "TopicProduceData")(name=topic, partition_data=(pdata,)),))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none
    assert response.throttle_time.total_seconds() > 0
    assert _alter(raw, {"client-id": "raw"}, {"producer_byte_rate": None}).error_code == 0
    raw.close()


def test_confluent_producer_and_consumer_are_throttled_and_lose_nothing(broker):
    raw = RawKafka(broker.bootstrap)
    topic = f"q-{uuid.uuid4().hex[:6]}"
    for client, key in (("quota-producer", "producer_byte_rate"), ("quota-consumer", "consumer_byte_rate")):
        assert _alter(raw, {"client-id": client}, {key: 2000.0}).error_code == 0
    raw.close()
    throttled = {"producer": 0, "consumer": 0}

    def counter(kind):
        def seen(event):
            if event.throttle_time > 0:
                throttled[kind] += 1
        return seen

    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "quota-producer", "linger.ms": 0,
                         "throttle_cb": counter("producer")})
    delivered = []
    for i in range(8):
        producer.produce(topic, b"%04d" % i + b"x" * 600, on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(30)
    assert delivered == [None] * 8
    producer.poll(0)
    assert throttled["producer"] >= 1

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "quota-consumer",
                         "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                         "throttle_cb": counter("consumer")})
    consumer.subscribe([topic])
    got = []
    for _ in range(400):
        if len(got) == 8:
            break
        msg = consumer.poll(0.25)
        if msg is not None and msg.error() is None:
            got.append(msg.value()[:4])
    consumer.close()
    assert got == [b"%04d" % i for i in range(8)]
    assert throttled["consumer"] >= 1
