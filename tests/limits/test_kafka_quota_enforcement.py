"""Kafka client quotas beyond byte rates, enforced on a real standalone with real clients:
request_percentage, controller_mutation_rate and the ip entity's connection_creation_rate."""

from __future__ import annotations

import logging
import re
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka.raw import RawKafka
from tests.kafka.test_client_quotas import _alter
from tests.standalone_process import Standalone


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    server = Standalone(tmp_path_factory.mktemp("kquotas") / "data", ["--compaction-interval", "0"])
    server.start()
    yield server
    assert server.stop() == 0, server.log.read_text()[-3000:]


@pytest.fixture
def raw(broker):
    connection = RawKafka(broker.bootstrap)
    yield connection
    connection.close()


def _wait(futures: dict) -> None:
    for future in futures.values():
        future.result(timeout=20)


def _error(futures: dict):
    """The error code each future of an admin call ends with (None: done)."""
    codes = {}
    for name, future in futures.items():
        try:
            future.result(timeout=20)
            codes[name] = None
        except KafkaException as exc:
            codes[name] = exc.args[0].code()
    return codes


def test_request_percentage_throttles_a_busy_client_and_loses_nothing(broker, raw):
    client = f"busy-{uuid.uuid4().hex[:6]}"
    # 0.01% of a thread: 0.1 ms of handling a second, which a few requests exceed.
    assert _alter(raw, {"client-id": client}, {"request_percentage": 0.01}).error_code == 0
    throttles = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": client, "linger.ms": 0,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    topic, delivered = f"busy-{uuid.uuid4().hex[:6]}", []
    deadline = time.monotonic() + 60
    while not any(t > 0 for t in throttles) and time.monotonic() < deadline:
        producer.produce(topic, b"m%d" % len(delivered), on_delivery=lambda err, _msg: delivered.append(err))
        producer.flush(30)
        producer.poll(0)
    assert any(t > 0 for t in throttles), "never throttled"
    assert delivered and delivered == [None] * len(delivered)
    # Another client id is not throttled by this client's quota.
    other = []
    quiet = Producer({"bootstrap.servers": broker.bootstrap, "client.id": f"quiet-{client}", "linger.ms": 0,
                      "throttle_cb": lambda event: other.append(event.throttle_time)})
    for i in range(3):
        quiet.produce(topic, b"q%d" % i)
        quiet.flush(30)
    quiet.poll(0)
    assert not any(t > 0 for t in other)
    assert _alter(raw, {"client-id": client}, {"request_percentage": None}).error_code == 0


def _kafka_python_admin(broker, client: str):
    from kafka.admin import KafkaAdminClient
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, client_id=client, request_timeout_ms=20000)


def test_controller_mutation_rate_refuses_topics_over_it(broker, raw):
    client = f"mutator-{uuid.uuid4().hex[:6]}"
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": 1.0}).error_code == 0
    first, second, third = (f"m{i}-{uuid.uuid4().hex[:6]}" for i in range(3))
    admin = _kafka_python_admin(broker, client)  # CreateTopics v7, DeleteTopics v5, CreatePartitions v3
    try:
        # The first topic is within the quota and takes the client 19 partitions over it (19 s at one
        # a second): the next topic of the same request is refused.
        created = admin.create_topics({first: {"num_partitions": 20, "replication_factor": 1},
                                       second: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
        assert {t["name"]: t["error_code"] for t in created["topics"]} == {first: 0, second: 89}
    finally:
        admin.close()
    # The quota is the client's, not its connection's: new clients (the throttled one waits out
    # the throttle time before its next request, as KIP-219 asks) are refused too.
    again = _kafka_python_admin(broker, client)
    try:
        grown = again.create_partitions({first: 21}, raise_errors=False)
        assert [(r.name, r.error_code) for r in grown.results] == [(first, 89)]
    finally:
        again.close()
    again = _kafka_python_admin(broker, client)
    try:
        deleted = again.delete_topics([first], raise_errors=False)
        assert [(t["name"], t["error_code"]) for t in deleted["topics"]] == [(first, 89)]
    finally:
        again.close()
    # Nothing refused was done; another client is not concerned.
    other = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": f"other-{client}"})
    listed = other.list_topics(timeout=20).topics
    assert second not in listed and len(listed[first].partitions) == 20
    assert _error(other.create_topics([NewTopic(third, 1)])) == {third: None}
    assert _error(other.delete_topics([first, third])) == {first: None, third: None}
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": None}).error_code == 0


def test_older_versions_are_throttled_not_refused(broker, raw):
    client = f"old-mutator-{uuid.uuid4().hex[:6]}"
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": 1.0}).error_code == 0
    throttles = []
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": client,  # CreateTopics v4
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    first, second = (f"o{i}-{uuid.uuid4().hex[:6]}" for i in range(2))
    # 13 partitions: two past the burst of 11 (Kafka's 11 one-second windows at one a second).
    assert _error(admin.create_topics([NewTopic(first, 13)])) == {first: None}
    assert _error(admin.create_topics([NewTopic(second, 1)])) == {second: None}
    admin.poll(0)
    assert any(t > 0 for t in throttles)
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": None}).error_code == 0


def _throttles(caplog, response: str) -> list[int]:
    """The throttle times (ms) kafka-python was told in ``response`` responses (it logs each)."""
    return [int(m.group(1)) for r in caplog.records
            if (m := re.search(rf"{response}\w* throttled by broker \((\d+) ms\)", r.getMessage()))]


def test_a_strict_request_is_throttled_only_when_a_topic_is_refused(broker, raw, caplog):
    caplog.set_level(logging.WARNING, logger="kafka")
    client = f"burst-{uuid.uuid4().hex[:6]}"
    # Half a partition a second: a burst of 5.5 (11 seconds' worth, as Kafka's bucket holds).
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": 0.5}).error_code == 0
    a, b, c, d = (f"b{i}-{uuid.uuid4().hex[:6]}" for i in range(4))
    admin = _kafka_python_admin(broker, client)
    try:
        created = admin.create_topics({name: {"num_partitions": n, "replication_factor": 1}
                                       for name, n in ((a, 5), (b, 5), (c, 1))}, raise_errors=False)
        # a leaves 0.5 in the bucket, so b is admitted and overdraws it; c is refused.
        assert {t["name"]: t["error_code"] for t in created["topics"]} == {a: 0, b: 0, c: 89}
    finally:
        admin.close()
    told = _throttles(caplog, "CreateTopicsResponse")
    assert len(told) == 1 and 0 < told[0] <= 9000, told  # 4.5 partitions owed at 0.5 a second
    caplog.clear()
    again = _kafka_python_admin(broker, client)
    try:
        created = again.create_topics({d: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(d, 89)]
    finally:
        again.close()
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": None}).error_code == 0


def test_a_strict_request_admitted_whole_is_not_throttled_and_the_next_pays(broker, raw, caplog):
    caplog.set_level(logging.WARNING, logger="kafka")
    client = f"big-{uuid.uuid4().hex[:6]}"
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": 0.5}).error_code == 0
    big, small = (f"g{i}-{uuid.uuid4().hex[:6]}" for i in range(2))
    admin = _kafka_python_admin(broker, client)
    try:
        created = admin.create_topics({big: {"num_partitions": 20, "replication_factor": 1}}, raise_errors=False)
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(big, 0)]
    finally:
        admin.close()
    assert _throttles(caplog, "CreateTopicsResponse") == []  # Kafka throttles no request it served whole
    again = _kafka_python_admin(broker, client)
    try:
        created = again.create_topics({small: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
        assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(small, 89)]
    finally:
        again.close()
    told = _throttles(caplog, "CreateTopicsResponse")
    # The whole debt, not a window's worth: 14.5 partitions at 0.5 a second.
    assert len(told) == 1 and 1000 < told[0] <= 29000, told
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": None}).error_code == 0


def test_a_debt_longer_than_an_int32_of_milliseconds_is_told_as_the_largest(broker, raw, caplog):
    caplog.set_level(logging.WARNING, logger="kafka")
    client = f"tiny-{uuid.uuid4().hex[:6]}"
    # One partition a 10**7 seconds: creating one owes about 10**10 ms, past throttle_time_ms' int32.
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": 1e-7}).error_code == 0
    first, second = (f"t{i}-{uuid.uuid4().hex[:6]}" for i in range(2))
    for name, code in ((first, 0), (second, 89)):
        admin = _kafka_python_admin(broker, client)
        try:
            created = admin.create_topics({name: {"num_partitions": 1, "replication_factor": 1}}, raise_errors=False)
            assert [(t["name"], t["error_code"]) for t in created["topics"]] == [(name, code)]
        finally:
            admin.close()
    assert _throttles(caplog, "CreateTopicsResponse") == [2**31 - 1]
    assert _alter(raw, {"client-id": client}, {"controller_mutation_rate": None}).error_code == 0


def test_connection_creation_rate_closes_connections_over_it(broker, raw):
    # One new connection from this address every 100 s: the next one is over the rate.
    assert _alter(raw, {"ip": "127.0.0.1"}, {"connection_creation_rate": 0.01}).error_code == 0
    try:
        RawKafka(broker.bootstrap).close()  # the one the rate allows
        producer = Producer({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 3000,
                             "reconnect.backoff.ms": 100, "log_level": 0})
        with pytest.raises(KafkaException):
            producer.list_topics(timeout=3)
    finally:
        assert _alter(raw, {"ip": "127.0.0.1"}, {"connection_creation_rate": None}).error_code == 0
    assert producer.list_topics(timeout=20).topics is not None  # served once the quota is gone


def test_broker_connection_creation_rate_delays_connections_over_it(tmp_path):
    config = tmp_path / "standalone.conf"
    config.write_text("max.connection.creation.rate=0.01\n")  # one new Kafka connection every 100 s
    server = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--config", str(config)])
    server.start()  # its readiness probe was the connection the rate allowed
    try:
        late = RawKafka(server.bootstrap, timeout=2)
        try:
            with pytest.raises(TimeoutError):  # accepted, not closed, and not served yet
                late.request(18, 0)
        finally:
            late.close()
        with urllib.request.urlopen(f"{server.http}/admin/v2/clusters", timeout=10) as answer:  # HTTP is not limited
            assert answer.status == 200
    finally:
        assert server.stop() == 0, server.log.read_text()[-3000:]
