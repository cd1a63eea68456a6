"""Kafka transactions end to end: confluent-kafka's transactional producer against a real standalone."""

from __future__ import annotations

import datetime
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from confluent_kafka import IsolationLevel

from kio.index import load_request_schema

from nereus.codec.kafka import make, nested
from tests.kafka.conftest import wait_until
from tests.kafka.raw import RawKafka


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(broker, *topics: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for fut in admin.create_topics([NewTopic(t, partitions) for t in topics]).values():
        fut.result(30)


def _producer(broker, tid: str, **extra) -> Producer:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                         "transaction.timeout.ms": 20000, "linger.ms": 5, **extra})
    producer.init_transactions(30)
    return producer


def consume(broker, topics: list[str], isolation: str, until: int, group: str | None = None, settle: float = 0.0,
            timeout: float = 30.0) -> list[tuple[str, int, str]]:
    """Values read from the start of ``topics`` until ``until`` records came (then ``settle`` more seconds)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group or _name("g"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    consumer.subscribe(topics)
    out: list[tuple[str, int, str]] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and len(out) < until:
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            out.append((msg.topic(), msg.partition(), msg.value().decode()))
        end = time.monotonic() + settle
        while time.monotonic() < end:
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                out.append((msg.topic(), msg.partition(), msg.value().decode()))
    finally:
        consumer.close()
    return out


def _latest(broker, topic: str, partition: int, isolation) -> int:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futs = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()}, isolation_level=isolation)
    return next(iter(futs.values())).result(10).offset


def test_commit_and_abort_across_topics_and_isolation_levels(broker):
    t1, t2 = _name("txa"), _name("txb")
    _create(broker, t1, t2)
    producer = _producer(broker, _name("tid"))
    committed, aborted = [], []
    for label, commit in (("c1", True), ("a1", False), ("c2", True)):
        producer.begin_transaction()
        for topic in (t1, t2):
            for partition in range(3):
                for i in range(3):
                    value = f"{label}-{topic}-{partition}-{i}"
                    producer.produce(topic, value.encode(), partition=partition)
                    (committed if commit else aborted).append(value)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(30)
            producer.abort_transaction(30)
    seen = consume(broker, [t1, t2], "read_committed", until=len(committed), settle=0.5)
    assert sorted(v for _, _, v in seen) == sorted(committed)
    everything = consume(broker, [t1, t2], "read_uncommitted", until=len(committed) + len(aborted), settle=0.5)
    assert sorted(v for _, _, v in everything) == sorted(committed + aborted)
    # the transaction's records of one partition come in order, the aborted ones between the committed ones
    in_p0 = [v for t, p, v in everything if t == t1 and p == 0]
    assert [v.split("-")[0] for v in in_p0] == ["c1"] * 3 + ["a1"] * 3 + ["c2"] * 3
    # no transaction is open: the last stable offset is the high watermark (markers included)
    high = _latest(broker, t1, 0, IsolationLevel.READ_UNCOMMITTED)
    assert high == 9 + 3  # nine records and three markers
    assert _latest(broker, t1, 0, IsolationLevel.READ_COMMITTED) == high
    producer.flush(10)


def test_open_transaction_holds_back_read_committed_and_lso(broker):
    topic = _name("txo")
    _create(broker, topic, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"before", partition=0)
    plain.flush(10)
    producer = _producer(broker, _name("tid"))
    producer.begin_transaction()
    producer.produce(topic, b"pending", partition=0)
    producer.flush(10)
    plain.produce(topic, b"after", partition=0)  # non-transactional, behind the open transaction
    plain.flush(10)
    assert _latest(broker, topic, 0, IsolationLevel.READ_UNCOMMITTED) == 3
    assert _latest(broker, topic, 0, IsolationLevel.READ_COMMITTED) == 1
    assert [v for *_, v in consume(broker, [topic], "read_committed", until=2, timeout=3)] == ["before"]
    # a long-polling read_committed consumer is woken when the commit moves the LSO
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _name("g"),
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 5000})
    consumer.assign([TopicPartition(topic, 0, 1)])
    try:
        assert consumer.poll(1.0) is None
        producer.commit_transaction(30)
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                got.append(msg.value())
        assert got == [b"pending", b"after"]
    finally:
        consumer.close()
    # the commit marker is at offset 3 (EndTxn is answered at the decision; the marker follows at once)
    wait_until(lambda: _latest(broker, topic, 0, IsolationLevel.READ_COMMITTED) == 4)


def test_offsets_in_a_transaction_become_visible_on_commit(broker):
    source, sink = _name("src"), _name("dst")
    _create(broker, source, sink, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        plain.produce(source, f"in-{i}".encode(), partition=0)
    plain.flush(10)
    group = _name("eos")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    stable = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    tp = TopicPartition(source, 0)
    try:
        consumer.assign([TopicPartition(source, 0, 0)])
        got = []
        while len(got) < 4:
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                got.append(msg)
        producer = _producer(broker, _name("tid"))
        for offset_after, commit in ((2, False), (4, True)):
            producer.begin_transaction()
            producer.produce(sink, b"out", partition=0)
            producer.send_offsets_to_transaction([TopicPartition(source, 0, offset_after)],
                                                 consumer.consumer_group_metadata(), 30)
            # pending: not visible, and a consumer asking for stable offsets is told to wait
            assert consumer.committed([tp], 10)[0].offset == -1001
            with pytest.raises(KafkaException):
                stable.committed([tp], 1.5)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
            expected = 4 if commit else -1001  # an aborted transaction's offsets are dropped
            assert stable.committed([tp], 10)[0].offset == expected  # waits while they are pending
            assert consumer.committed([tp], 10)[0].offset == expected
    finally:
        consumer.close()
        stable.close()


def test_second_producer_fences_the_first(broker):
    topic = _name("txf")
    _create(broker, topic, partitions=2)
    tid = _name("tid")
    first = _producer(broker, tid)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(10)
    second = _producer(broker, tid)  # fences the first and aborts its open transaction
    second.begin_transaction()
    second.produce(topic, b"second", partition=0)
    second.produce(topic, b"second", partition=1)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as caught:
        first.produce(topic, b"zombie-2", partition=1)
        first.commit_transaction(10)
    error = caught.value.args[0]
    assert error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                             KafkaError.INVALID_PRODUCER_EPOCH), error
    seen = consume(broker, [topic], "read_committed", until=2, settle=0.5)
    assert sorted(v for *_, v in seen) == ["second", "second"]


def test_transaction_timeout_aborts_and_lso_advances(broker):
    topic = _name("txt")
    _create(broker, topic, partitions=1)
    # long enough that the first LSO check below comes before the timeout even on a loaded machine
    abandoned = _producer(broker, _name("tid"), **{"transaction.timeout.ms": 8000})
    abandoned.begin_transaction()
    abandoned.produce(topic, b"abandoned", partition=0)
    abandoned.flush(10)
    assert _latest(broker, topic, 0, IsolationLevel.READ_COMMITTED) == 0
    # the coordinator aborts it after its timeout: the abort marker is written and the LSO moves past it
    wait_until(lambda: _latest(broker, topic, 0, IsolationLevel.READ_COMMITTED) == 2, timeout=40)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, b"later", partition=0)
    plain.flush(10)
    assert [v for *_, v in consume(broker, [topic], "read_committed", until=1, settle=0.5)] == ["later"]


def test_transaction_admin_requests(broker):
    topic = _name("txd")
    _create(broker, topic, partitions=2)
    tid = _name("tid")
    producer = _producer(broker, tid)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=1)
    producer.flush(10)
    raw = RawKafka(broker.bootstrap)
    try:
        found = raw.request(10, 4, key_type=1, coordinator_keys=(tid,)).coordinators[0]
        assert found.error_code == 0 and found.port == int(broker.bootstrap.rsplit(":", 1)[1])
        state = raw.request(65, 0, transactional_ids=(tid, "no-such-id")).transaction_states
        assert state[0].transaction_state == "Ongoing"
        assert [(t.topic, tuple(t.partitions)) for t in state[0].topics] == [(topic, (1,))]
        assert state[0].transaction_timeout == datetime.timedelta(seconds=20)
        assert state[1].error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        listed = raw.request(66, 1, state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1)
        assert tid in [t.transactional_id for t in listed.transaction_states]
        cls = load_request_schema(61, 0)
        asked = make(nested(cls, "TopicRequest"), name=topic, partition_indexes=(0, 1))
        parts = raw.request(61, 0, topics=(asked,)).topics[0].partitions
        assert [p.active_producers for p in parts][0] == ()
        (active,) = parts[1].active_producers
        assert (active.producer_id, active.producer_epoch) == (state[0].producer_id, state[0].producer_epoch)
        assert active.current_txn_start_offset == 0 and active.last_sequence == 0
        producer.commit_transaction(30)
        wait_until(lambda: raw.request(65, 0, transactional_ids=(tid,)).transaction_states[0].transaction_state
                   == "CompleteCommit")
        listed = raw.request(66, 1, state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1)
        assert tid not in [t.transactional_id for t in listed.transaction_states]
    finally:
        raw.close()


def test_control_batches_from_clients_are_refused(broker):
    from nereus.transactions import control_batch

    topic = _name("txc")
    _create(broker, topic, partitions=1)
    raw = RawKafka(broker.bootstrap)
    try:
        answer = raw.produce(topic, 0, control_batch(12345, 0, True, timestamp_ms=int(time.time() * 1000)))
        assert answer.error_code == 87  # INVALID_RECORD
    finally:
        raw.close()


def test_write_txn_markers_from_another_broker_ends_the_partition_part(broker):
    topic = _name("txm")
    _create(broker, topic, partitions=1)
    producer = _producer(broker, _name("tid"))
    producer.begin_transaction()
    producer.produce(topic, b"pending", partition=0)
    producer.flush(10)
    raw_pid = None
    raw = RawKafka(broker.bootstrap)
    try:
        listed = raw.request(66, 1, state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1)
        pid = next(t.producer_id for t in listed.transaction_states if t.transactional_id in _ids(raw, topic))
        cls = load_request_schema(27, 1)
        marker = make(nested(cls, "WritableTxnMarker"), producer_id=pid, producer_epoch=0, transaction_result=False,
                      coordinator_epoch=0,
                      topics=(make(nested(cls, "WritableTxnMarkerTopic"), name=topic, partition_indexes=(0,)),))
        answer = raw.request(27, 1, markers=(marker,))
        raw_pid = answer.markers[0].producer_id
        assert [p.error_code for p in answer.markers[0].topics[0].partitions] == [0]
    finally:
        raw.close()
    assert raw_pid == pid
    # the partition's part is aborted: the LSO moved past the marker, the record is hidden from read_committed
    assert _latest(broker, topic, 0, IsolationLevel.READ_COMMITTED) == 2
    assert consume(broker, [topic], "read_committed", until=1, timeout=2) == []


def _ids(raw: RawKafka, topic: str) -> set[str]:
    """Transactional ids whose ongoing transaction includes ``topic``."""
    listed = raw.request(66, 1, state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1)
    ids = tuple(t.transactional_id for t in listed.transaction_states)
    described = raw.request(65, 0, transactional_ids=ids).transaction_states
    return {s.transactional_id for s in described if any(t.topic == topic for t in s.topics)}


def test_add_partitions_batched_form_and_verify_only(broker):
    topic, tid = _name("txv"), _name("tid")
    _create(broker, topic, partitions=2)
    raw = RawKafka(broker.bootstrap)
    try:
        raw.request(10, 4, key_type=1, coordinator_keys=(tid,))
        init = raw.request(22, 4, transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=30),
                           producer_id=-1, producer_epoch=-1)
        assert init.error_code == 0
        cls = load_request_schema(24, 4)

        def add(partitions, verify_only):
            txn = make(nested(cls, "AddPartitionsToTxnTransaction"), transactional_id=tid,
                       producer_id=init.producer_id, producer_epoch=init.producer_epoch, verify_only=verify_only,
                       topics=(make(nested(cls, "AddPartitionsToTxnTopic"), name=topic, partitions=partitions),))
            answer = raw.request(24, 4, transactions=(txn,))
            assert answer.error_code == 0
            return {r.partition_index: r.partition_error_code
                    for r in answer.results_by_transaction[0].topic_results[0].results_by_partition}

        assert add((0,), True) == {0: 48}  # INVALID_TXN_STATE: not in a transaction yet
        assert add((0,), False) == {0: 0}
        assert add((0, 1), True) == {0: 0, 1: 48}
        end = raw.request(26, 3, transactional_id=tid, producer_id=init.producer_id,
                          producer_epoch=init.producer_epoch, committed=False)
        assert end.error_code == 0
    finally:
        raw.close()
