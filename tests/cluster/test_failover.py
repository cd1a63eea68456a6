"""A topic owner killed (-9) under load: its topics move, nothing acknowledged is lost or stored twice."""

from __future__ import annotations

import threading
import time
import urllib.request
import uuid

import pulsar
import pytest

from tests.kafka.raw import RawKafka

from .clients import PUBLIC, PulsarLoad, assert_exactly_once, pulsar_client, read_all


@pytest.mark.parametrize("store", ["file", "s3"])
def test_pulsar_owner_killed_under_load(make_cluster, store):
    cluster = make_cluster(["a", "a", "b"], store=store)
    topic = f"{PUBLIC}kill-{store}"
    client = pulsar_client(cluster.service_url(), cluster.root, "kill")
    try:
        load = PulsarLoad(client, topic, "k").start()
        load.wait_acked(300)

        # A durable subscription acks the first 100 values, then goes away.
        consumer = client.subscribe(topic, "durable", initial_position=pulsar.InitialPosition.Earliest)
        first = []
        for _ in range(100):
            msg = consumer.receive(timeout_millis=30_000)
            first.append(msg.data())
            consumer.acknowledge(msg)
        consumer.close()
        assert first == [load.value(i) for i in range(100)]

        owner = cluster.broker(cluster.owner(topic))
        before = load.acked_count
        owner.kill()
        killed_at = time.monotonic()

        new_owner = cluster.wait_for(lambda: (o := cluster.owner(topic)) not in (None, owner.name) and o, 60,
                                     f"{topic} owned by a broker other than {owner.name}")
        load.wait_acked(before + 300, timeout=90)
        moved_after = time.monotonic() - killed_at
        load.stop()
        assert not load.errors, load.errors[:5]

        assert_exactly_once(read_all(client, topic), load.acked, topic)

        # The subscription resumes right after what it acknowledged, on the new owner: at value
        # 100, or at the start of the batch holding it (a batch is acknowledged whole, as Pulsar does).
        entry_of_100 = load.acked[load.value(100)].entry_id()
        start = min(i for i in range(101) if load.acked[load.value(i)].entry_id() == entry_of_100)
        consumer = client.subscribe(topic, "durable")
        resumed = [consumer.receive(timeout_millis=30_000).data() for _ in range(50)]
        consumer.close()
        first_seq = int(resumed[0].split(b"-")[1])
        assert start <= first_seq <= 100, f"resumed at {resumed[0]!r}; the batch of value 100 starts at {start}"
        assert resumed == [load.value(i) for i in range(first_seq, first_seq + 50)]
        assert cluster.owner(topic) == new_owner
        print(f"{topic}: moved {owner.name} -> {new_owner}, producing again {moved_after:.1f}s after the kill")
    finally:
        client.close()


@pytest.mark.parametrize("store", ["file", "s3"])
def test_kafka_owner_killed_under_idempotent_load(make_cluster, store):
    """An idempotent confluent-kafka producer and a consumer group through the kill of a partition owner."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = make_cluster(["a", "a", "b"], store=store)
    topic, partitions = f"kkill-{store}", 3
    bootstrap = cluster.bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})  # referenced until the result is in
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=30)[topic].result(timeout=60)

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 120_000, "retry.backoff.ms": 200})
    lock = threading.Lock()
    acked: dict[bytes, tuple[int, int]] = {}
    errors: list[str] = []
    stop = threading.Event()

    def report(err, msg):
        with lock:
            if err is not None:
                errors.append(f"{msg.value()!r}: {err}")
            else:
                acked[msg.value()] = (msg.partition(), msg.offset())

    def produce():
        seq = 0
        while not stop.is_set():
            try:
                producer.produce(topic, f"kk-{seq:08d}".encode(), partition=seq % partitions, on_delivery=report)
                seq += 1
            except BufferError:
                pass
            producer.poll(0.003)

    def acked_count():
        with lock:
            return len(acked)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        cluster.wait_for(lambda: acked_count() >= 300, 60, "300 records acknowledged")

        owners = cluster.owners()
        victim_name = owners[f"{PUBLIC}{topic}-partition-0"]
        victim = cluster.broker(victim_name)
        # A group coordinated by the victim consumes and commits the first 60 records of each partition, then
        # leaves: after the kill its offsets are served by the next broker of the ring.
        group = {"bootstrap.servers": bootstrap, "group.id": group_coordinated_by(cluster, victim),
                 "auto.offset.reset": "earliest", "enable.auto.commit": False}
        consumer = Consumer(group)
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + 60
        while min(seen.values()) < 60 and time.monotonic() < deadline:
            for msg in consumer.consume(100, timeout=0.5):
                if msg.error() is None and msg.offset() < 60:
                    seen[msg.partition()] = max(seen[msg.partition()], msg.offset() + 1)
        assert min(seen.values()) >= 60, f"consumed {seen}"
        consumer.commit(offsets=[TopicPartition(topic, p, 60) for p in range(partitions)], asynchronous=False)
        consumer.close()

        before = acked_count()
        victim.kill()
        cluster.wait_for(lambda: cluster.owner(f"{PUBLIC}{topic}-partition-0") not in (None, victim_name), 60,
                         f"partition 0 owned by a broker other than {victim_name}")
        cluster.wait_for(lambda: acked_count() >= before + 300, 120, f"{before + 300} records acknowledged")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert producer.flush(120) == 0, "records still undelivered"
    assert not errors, errors[:5]

    # Read every partition back through the surviving brokers: each acked record exactly once.
    reader = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "check", "enable.auto.commit": False,
                       "auto.offset.reset": "earliest"})
    reader.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    stored: list[bytes] = []
    ends = {}
    for p in range(partitions):
        _low, high = reader.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        ends[p] = high
    positions = {p: 0 for p in range(partitions)}
    deadline = time.monotonic() + 120
    while any(positions[p] < ends[p] for p in range(partitions)) and time.monotonic() < deadline:
        for msg in reader.consume(500, timeout=0.5):
            if msg.error() is None:
                stored.append(msg.value())
                positions[msg.partition()] = msg.offset() + 1
    reader.close()
    assert positions == ends, f"read up to {positions}, ends {ends}"
    assert_exactly_once(stored, acked, topic)

    # The group resumes from its committed offsets.
    consumer = Consumer(group)
    consumer.subscribe([topic])
    first: dict[int, int] = {}
    deadline = time.monotonic() + 90
    while len(first) < partitions and time.monotonic() < deadline:
        for msg in consumer.consume(100, timeout=0.5):
            if msg.error() is None:
                first.setdefault(msg.partition(), msg.offset())
    consumer.close()
    assert first == {p: 60 for p in range(partitions)}


def test_partitioned_topic_survives_the_kill_of_a_partition_owner(make_cluster):
    """The partitions of one topic are spread over brokers; losing one owner loses no acknowledged message."""
    cluster = make_cluster(["a", "a", "b"])
    base = f"{PUBLIC}pkill"
    partitions = 6
    request = urllib.request.Request(f"{cluster.brokers_list[0].http_url}/admin/v2/persistent/public/default/pkill"
                                     "/partitions", data=str(partitions).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).close()
    names = [f"{base}-partition-{i}" for i in range(partitions)]
    client = pulsar_client(cluster.service_url(), cluster.root, "pkill")
    try:
        load = PulsarLoad(client, base, "p").start()
        load.wait_acked(300)
        owners = {n: cluster.owner(n) for n in names}
        assert len(set(owners.values())) > 1, owners  # the partitions are spread
        victim = cluster.broker(owners[names[0]])
        before = load.acked_count
        victim.kill()
        cluster.wait_for(lambda: all(cluster.owner(n) not in (None, victim.name) for n in names), 60,
                         f"every partition owned by a broker other than {victim.name}")
        load.wait_acked(before + 300, timeout=90)
        load.stop()
        assert not load.errors, load.errors[:5]
        stored = [value for name in names for value in read_all(client, name)]
        assert_exactly_once(stored, load.acked, base)
    finally:
        client.close()


def group_coordinated_by(cluster, broker) -> str:
    """A fresh consumer group id whose coordinator (FindCoordinator, asked of another broker) is ``broker``."""
    node = cluster.brokers()[broker.name]["node_id"]
    other = next(b for b in cluster.running if b is not broker)
    for _ in range(300):
        group = f"kill-group-{uuid.uuid4().hex[:8]}"
        raw = RawKafka(other.bootstrap)
        try:
            answer = raw.request(10, 3, key=group, key_type=0)  # FindCoordinator, key type GROUP
        finally:
            raw.close()
        assert answer.error_code == 0, answer
        if answer.node_id == node:
            return group
    raise AssertionError(f"no group id lands on {broker.name}")
