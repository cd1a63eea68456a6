"""Key-based topic compaction through the official pulsar-client and the admin API."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.pulsar_admin.conftest import Admin
from tests.standalone_process import Standalone


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = Standalone(tmp_path_factory.mktemp("compaction") / "data",
                      ["--compaction-interval", "0", "--compaction-monitor-interval", "0.3"])
    proc.start()
    yield proc
    assert proc.stop() == 0, proc.log.read_text()[-3000:]


@pytest.fixture(scope="module")
def rest(server) -> Admin:
    return Admin(server.http)


@pytest.fixture
def pclient(server, make_client):
    return make_client(server.url)


def new_topic() -> tuple[str, str]:
    local = f"c-{uuid.uuid4().hex[:10]}"
    return f"persistent://public/default/{local}", f"/persistent/public/default/{local}"


def wait_status(rest: Admin, path: str, want: str = "SUCCESS", timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status, value = rest.get(path + "/compaction")
        assert status == 200, value
        if value["status"] == want:
            return value
        assert value["status"] != "ERROR", value
        assert time.monotonic() < deadline, f"compaction of {path} still {value}"
        time.sleep(0.1)


def produce(pclient, topic: str, updates: list[tuple[str | None, bytes]], *, batching: bool = True) -> list:
    """Send (batched by default); returns each message's MessageId (as produced)."""
    producer = pclient.create_producer(topic, batching_enabled=batching, batching_max_messages=7,
                                       batching_max_publish_delay_ms=5)
    ids: list = [None] * len(updates)

    def done(i):
        def callback(result, msg_id):
            assert str(result).endswith("Ok"), result
            ids[i] = msg_id
        return callback

    for i, (key, value) in enumerate(updates):
        kwargs = {"partition_key": key} if key is not None else {}
        producer.send_async(value, done(i), **kwargs)
    producer.flush()
    producer.close()
    assert all(i is not None for i in ids)
    return ids


def read_all(pclient, pulsar, topic: str, *, compacted: bool) -> list:
    reader = pclient.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=10000))
    reader.close()
    return out


def expected_view(updates, ids) -> list[tuple]:
    """(message id, key, value) the view keeps: latest per key unless it is empty (a tombstone
    removes its key at once, as Pulsar's compactor does), every keyless message."""
    latest = {key: i for i, (key, _v) in enumerate(updates) if key is not None}
    return [(str(ids[i]), key, value) for i, (key, value) in enumerate(updates)
            if key is None or (latest[key] == i and value)]


def seen(messages) -> list[tuple]:
    return [(str(m.message_id()), m.partition_key() or None, m.data()) for m in messages]


def test_read_compacted_readers_and_table_views_see_the_latest_per_key(server, rest, pclient, pulsar):
    topic, path = new_topic()
    assert rest.get(path + "/compaction") == (404, {"reason": "Topic not found"})
    updates = [(f"k{i % 10}", b"v%d" % i) for i in range(60)]
    updates += [("k3", b""), (None, b"no key"), ("k4", b"v-last")]
    ids = produce(pclient, topic, updates)
    assert rest.get(path + "/compaction")[1]["status"] == "NOT_RUN"
    assert rest.put(path + "/compaction")[0] == 204
    wait_status(rest, path)

    assert seen(read_all(pclient, pulsar, topic, compacted=True)) == expected_view(updates, ids)
    # Normal readers and consumers still see every message.
    assert seen(read_all(pclient, pulsar, topic, compacted=False)) == \
        [(str(ids[i]), k, v) for i, (k, v) in enumerate(updates)]

    # Writes after the horizon come after the view, and a second compaction is incremental.
    more = [("k1", b"after-1"), ("k3", b"back"), ("k9", b"")]
    ids += produce(pclient, topic, more)
    updates += more
    assert seen(read_all(pclient, pulsar, topic, compacted=True)) == \
        expected_view(updates[:-3], ids[:-3]) + [(str(ids[-3 + i]), k, v) for i, (k, v) in enumerate(more)]
    assert rest.put(path + "/compaction")[0] == 204
    wait_status(rest, path)
    assert seen(read_all(pclient, pulsar, topic, compacted=True)) == expected_view(updates, ids)

    # The table view: latest value per key, tombstoned keys gone.
    table = pclient.create_table_view(topic)
    items: dict = {}
    table.for_each(lambda k, v: items.__setitem__(k, v))
    table.close()
    model = {}
    for key, value in updates:
        if key is not None:
            model[key] = value
    assert items == {k: v for k, v in model.items() if v}


def test_a_durable_read_compacted_subscription_acks_past_the_gaps(server, rest, pclient, pulsar):
    topic, path = new_topic()
    # Unbatched: a client acknowledges a batch only once it acknowledged all its messages,
    # and the compacted-away ones of a partly kept batch never reach it.
    updates = [(f"k{i % 3}", b"v%d" % i) for i in range(30)]
    ids = produce(pclient, topic, updates, batching=False)
    assert rest.put(path + "/compaction")[0] == 204
    wait_status(rest, path)
    consumer = pclient.subscribe(topic, "compacted", is_read_compacted=True,
                                 initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(timeout_millis=10000) for _ in range(3)]
    assert seen(got) == expected_view(updates, ids)
    for m in got:
        consumer.acknowledge(m)
    deadline = time.monotonic() + 20
    while True:  # every offset is acknowledged: the compacted-away ones too
        stats = rest.ok("GET", path + "/stats")["subscriptions"]["compacted"]
        if stats["msgBacklog"] == 0:
            break
        assert time.monotonic() < deadline, (stats["msgBacklog"], stats)
        time.sleep(0.1)
    consumer.close()
    with pytest.raises(Exception):  # Pulsar allows compacted reads on Exclusive and Failover only
        pclient.subscribe(topic, "shared", is_read_compacted=True, consumer_type=pulsar.ConsumerType.Shared)


def produce_batches(pclient, topic: str, batches: list[list[tuple[str, bytes]]]) -> list:
    """Each inner list as exactly one batch; returns the MessageIds in order."""
    size = max(len(b) for b in batches)
    producer = pclient.create_producer(topic, batching_enabled=True, batching_max_messages=size,
                                       batching_max_publish_delay_ms=60_000)
    ids: list = []
    for batch in batches:
        start = len(ids)
        ids += [None] * len(batch)
        for i, (key, value) in enumerate(batch):
            def done(result, msg_id, at=start + i):
                assert str(result).endswith("Ok"), result
                ids[at] = msg_id
            producer.send_async(value, done, partition_key=key)
        producer.flush()
    producer.close()
    assert all(i is not None for i in ids)
    assert len({(i.ledger_id(), i.entry_id()) for i in ids}) == len(batches)  # one entry per batch
    return ids


def wait_backlog_zero(rest: Admin, path: str, sub: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        stats = rest.ok("GET", path + "/stats")["subscriptions"][sub]
        if stats["msgBacklog"] == 0:
            return
        assert time.monotonic() < deadline, (stats["msgBacklog"], stats)
        time.sleep(0.1)


def compacted_subscription(pclient, pulsar, rest, topic, path, batches, **kwargs):
    updates = [u for batch in batches for u in batch]
    ids = produce_batches(pclient, topic, batches)
    assert rest.put(path + "/compaction")[0] == 204
    wait_status(rest, path)
    consumer = pclient.subscribe(topic, "compacted", is_read_compacted=True,
                                 initial_position=pulsar.InitialPosition.Earliest, **kwargs)
    want = expected_view(updates, ids)
    got = [consumer.receive(timeout_millis=10000) for _ in want]
    assert seen(got) == want  # the kept messages keep their MessageIds, batch indexes included
    return consumer, got


def test_batches_compacted_at_their_end_are_cleared_by_individual_acks(server, rest, pclient, pulsar):
    # Each batch's last two keys are written again by the next batch: the batches keep a
    # prefix, which the broker sends as a batch ending at its last kept message.
    topic, path = new_topic()
    batches = [[(f"k{2 * b + i}", b"v%d-%d" % (b, i)) for i in range(4)] for b in range(4)]
    consumer, got = compacted_subscription(pclient, pulsar, rest, topic, path, batches)
    for m in got:
        consumer.acknowledge(m)
    wait_backlog_zero(rest, path, "compacted")
    consumer.close()


def test_cumulative_acks_clear_partly_compacted_batches(server, rest, pclient, pulsar):
    topic, path = new_topic()
    # Gaps at the start, in the middle and at the end of batches; the last batch ends
    # with a tombstone, so no later message's ack covers its entry.
    keys = ["a", "b", "c", "d", "a", "e", "b", "f", "c", "g", "e", "h", "d", "f", "g"]
    batches = [[(k, b"v%d" % (n + i)) for i, k in enumerate(keys[n:n + 5])] for n in range(0, len(keys), 5)]
    batches[-1][-1] = ("g", b"")
    consumer, got = compacted_subscription(pclient, pulsar, rest, topic, path, batches)
    for m in got:
        consumer.acknowledge_cumulative(m)
    wait_backlog_zero(rest, path, "compacted")
    consumer.close()


def test_batch_index_acks_clear_batches_with_leading_gaps(server, rest, pclient, pulsar):
    topic, path = new_topic()
    batches = [[("a", b"1"), ("b", b"2"), ("c", b"3")], [("a", b"4"), ("d", b"5"), ("b", b"6")]]
    consumer, got = compacted_subscription(pclient, pulsar, rest, topic, path, batches,
                                           batch_index_ack_enabled=True)
    assert [m.data() for m in got] == [b"3", b"4", b"5", b"6"]
    for m in got:
        consumer.acknowledge(m)
    wait_backlog_zero(rest, path, "compacted")
    consumer.close()


def test_the_compaction_threshold_policy_starts_compaction(server, rest, pclient, pulsar):
    topic, path = new_topic()
    produce(pclient, topic, [("a", b"1")])
    assert rest.get(path + "/compactionThreshold")[0] == 204
    assert rest.get("/namespaces/public/default/compactionThreshold")[0] in (200, 204)
    assert rest.post(path + "/compactionThreshold", -1)[0] == 412
    assert rest.post(path + "/compactionThreshold", 2000)[0] == 204
    assert rest.get(path + "/compactionThreshold") == (200, 2000)
    produce(pclient, topic, [("a", b"x" * 100)] * 5)  # below the threshold: nothing happens
    produce(pclient, topic, [("a", b"y" * 1000)] * 3)
    wait_status(rest, path)
    assert [m.data() for m in read_all(pclient, pulsar, topic, compacted=True)] == [b"y" * 1000]
    assert rest.delete(path + "/compactionThreshold")[0] == 204
    assert rest.get(path + "/compactionThreshold")[0] == 204


def test_partitioned_topics_compact_each_partition(server, rest, pclient, pulsar):
    topic, path = new_topic()
    assert rest.put(path + "/partitions", 2)[0] == 204
    producer = pclient.create_producer(topic, batching_enabled=False)
    for i in range(40):
        producer.send(b"v%d" % i, partition_key=f"k{i % 4}")
    producer.close()
    assert rest.put(path + "/compaction")[0] == 204
    wait_status(rest, path)
    reader_values = {}
    for part in range(2):
        for m in read_all(pclient, pulsar, f"{topic}-partition-{part}", compacted=True):
            assert m.partition_key() not in reader_values
            reader_values[m.partition_key()] = m.data()
    assert reader_values == {f"k{k}": b"v%d" % (36 + k) for k in range(4)}


def test_a_reader_with_a_small_queue_reads_a_view_of_many_shortened_batches(server, rest, pclient, pulsar):
    # 40 batches of 10: each starts with a key of its own, then 9 keys that the next
    # batch writes again, so the view sends each batch cut after its first message; the
    # reader's few permits must come back in full for it to reach the end.
    topic, path = new_topic()
    batches = [[(f"own{n}", b"o%d" % n)] + [(f"shared{i}", b"s%d-%d" % (n, i)) for i in range(9)]
               for n in range(40)]
    updates = [u for batch in batches for u in batch]
    ids = produce_batches(pclient, topic, batches)
    assert rest.put(path + "/compaction")[0] == 204
    wait_status(rest, path)
    reader = pclient.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True,
                                   receiver_queue_size=3)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(timeout_millis=10000))
    reader.close()
    assert seen(got) == expected_view(updates, ids)


def test_a_kafka_compact_topic_past_its_dirty_ratio_compacts_itself(server, rest):
    """The monitor's pass reads each loaded Kafka topic's configs (in batches, with the Pulsar
    policies of the others): a compact topic whose dirty share passes min.cleanable.dirty.ratio
    starts compacting with nobody asking, one without cleanup.policy=compact does not."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    compact, plain = f"kc-{uuid.uuid4().hex[:8]}", f"kd-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for name, configs in ((compact, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}), (plain, {})):
        admin.create_topics([NewTopic(name, 1, config=configs)])[name].result(20)
    producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0})
    for name in (compact, plain):
        for i in range(30):
            producer.produce(name, key=b"k%d" % (i % 3), value=b"v%d" % i)
            producer.flush(20)
    wait_status(rest, f"/persistent/public/default/{compact}-partition-0")
    status, body = rest.get(f"/persistent/public/default/{plain}-partition-0/compaction")
    assert status == 200 and body["status"] == "NOT_RUN", body
