"""Share groups at the protocol level: session epochs, per-offset acknowledgement types, record
states, describe, and what survives a broker restart (a raw client over a socket)."""

from __future__ import annotations

import datetime

from confluent_kafka import Producer
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from nereus.codec.kafka import make, nested

from .conftest import wait_until
from .raw import RawKafka

ACCEPT, RELEASE, REJECT = 1, 2, 3


def produce(broker, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, f"r{i}".encode())
    assert producer.flush(20) == 0


def join(raw: RawKafka, group: str, member: str, topic: str):
    return raw.request(76, 1, group_id=group, member_id=member, member_epoch=0, rack_id=None,
                       subscribed_topic_names=(topic,))


def _partitions(cls, name: str, topic_id, acks):
    batch_cls = nested(cls, "AcknowledgementBatch")
    batches = tuple(make(batch_cls, first_offset=first, last_offset=last, acknowledge_types=tuple(types))
                    for first, last, types in acks)
    part_name, topic_name = ("FetchPartition", "FetchTopic") if name == "fetch" else \
        ("AcknowledgePartition", "AcknowledgeTopic")
    part = make(nested(cls, part_name), partition_index=0, acknowledgement_batches=batches)
    return (make(nested(cls, topic_name), topic_id=topic_id, partitions=(part,)),)


def share_fetch(raw: RawKafka, group: str, member: str, epoch: int, topic_id, acks=(), wait_ms: int = 0):
    cls = load_request_schema(78, 1)
    return raw.request(78, 1, group_id=group, member_id=member, share_session_epoch=epoch,
                       max_wait=datetime.timedelta(milliseconds=wait_ms), min_bytes=1, max_bytes=1 << 20,
                       max_records=500, batch_size=500, topics=_partitions(cls, "fetch", topic_id, acks),
                       forgotten_topics_data=())


def share_ack(raw: RawKafka, group: str, member: str, epoch: int, topic_id, acks):
    cls = load_request_schema(79, 1)
    return raw.request(79, 1, group_id=group, member_id=member, share_session_epoch=epoch,
                       topics=_partitions(cls, "ack", topic_id, acks))


def acquired(resp) -> list[tuple[int, int]]:
    """(offset, delivery count) of every record acquired by a ShareFetch response."""
    assert resp.error_code == ErrorCode.none, resp
    return [(o, a.delivery_count) for t in resp.responses for p in t.partitions for a in p.acquired_records
            for o in range(a.first_offset, a.last_offset + 1)]


class Member:
    """One member's share session with this broker."""

    def __init__(self, raw: RawKafka, group: str, member: str, topic_id) -> None:
        self.raw, self.group, self.member, self.topic_id = raw, group, member, topic_id
        self.epoch = 0

    def fetch(self, acks=(), wait_ms: int = 0) -> list[tuple[int, int]]:
        resp = share_fetch(self.raw, self.group, self.member, self.epoch, self.topic_id, acks, wait_ms)
        self.epoch += 1
        return acquired(resp)

    def fetch_until(self, count: int) -> list[tuple[int, int]]:
        got: list = []

        def enough():
            got.extend(self.fetch(wait_ms=200))
            return len(got) >= count
        wait_until(enough, timeout=20)
        return got

    def ack(self, acks, close: bool = False):
        resp = share_ack(self.raw, self.group, self.member, -1 if close else self.epoch, self.topic_id, acks)
        if not close:
            self.epoch += 1
        assert resp.error_code == ErrorCode.none, resp
        return {p.partition_index: p.error_code for t in resp.responses for p in t.partitions}


def topic_id_of(raw: RawKafka, topic: str):
    (meta,) = raw.metadata([topic], version=12).topics
    assert meta.error_code == ErrorCode.none
    return meta.topic_id


def test_sessions_acknowledgement_types_and_record_states(broker, topic, group):
    raw = RawKafka(broker.bootstrap)
    try:
        topic_id = topic_id_of(raw, topic)
        hb = join(raw, group, "m1", topic)
        assert hb.error_code == ErrorCode.none and hb.member_epoch > 0
        assert [(tp.topic_id, tp.partitions) for tp in hb.assignment.topic_partitions] == [(topic_id, (0,))]
        (described,) = raw.request(77, 1, group_ids=(group,), include_authorized_operations=False).groups
        assert (described.group_state, [m.member_id for m in described.members]) == ("Stable", ["m1"])
        listed = {g.group_id: g for g in raw.request(16, 4, states_filter=()).groups}
        assert (listed[group].protocol_type, listed[group].group_state) == ("share", "Stable")

        assert share_fetch(raw, group, "m1", 1, topic_id).error_code == ErrorCode.share_session_not_found
        m1 = Member(raw, group, "m1", topic_id)
        assert m1.fetch() == []  # opens the session; the group starts at the end of the partition
        produce(broker, topic, 4)
        assert sorted(m1.fetch_until(4)) == [(0, 1), (1, 1), (2, 1), (3, 1)]
        wrong = share_fetch(raw, group, "m1", m1.epoch + 5, topic_id)
        assert wrong.error_code == ErrorCode.invalid_share_session_epoch

        # one type per offset: accept 0, release 1, reject 2, accept 3
        assert m1.ack([(0, 3, (ACCEPT, RELEASE, REJECT, ACCEPT))]) == {0: ErrorCode.none}
        assert m1.ack([(0, 0, (ACCEPT,))]) == {0: ErrorCode.invalid_record_state}  # no longer held

        m2 = Member(raw, group, "m2", topic_id)
        assert m2.fetch() == [(1, 2)]  # only the released record, delivered a second time
        m2.ack([], close=True)  # closing the session releases what m2 holds
        assert m1.fetch() == [(1, 3)]
        assert m1.fetch(acks=[(1, 1, (ACCEPT,))]) == []
        leave = raw.request(76, 1, group_id=group, member_id="m1", member_epoch=-1, rack_id=None,
                            subscribed_topic_names=None)
        assert (leave.error_code, leave.member_epoch) == (ErrorCode.none, -1)
    finally:
        raw.close()


def test_acknowledgements_survive_a_restart(fresh_broker, topic, group):
    fresh_broker.start()
    raw = RawKafka(fresh_broker.bootstrap)
    topic_id = topic_id_of(raw, topic)
    m1 = Member(raw, group, "m1", topic_id)
    assert m1.fetch() == []
    produce(fresh_broker, topic, 4)
    assert sorted(m1.fetch_until(4)) == [(0, 1), (1, 1), (2, 1), (3, 1)]
    assert m1.ack([(0, 1, (ACCEPT,))]) == {0: ErrorCode.none}
    raw.close()
    assert fresh_broker.stop() == 0
    fresh_broker.start()
    raw = RawKafka(fresh_broker.bootstrap)
    try:
        again = Member(raw, group, "m1", topic_id)
        # the acknowledged records are gone for good; the in-flight ones come back, delivered a second time
        assert sorted(again.fetch_until(2)) == [(2, 2), (3, 2)]
    finally:
        raw.close()


def test_a_stored_share_group_is_listed_and_described_after_a_restart(fresh_broker, topic, group):
    from confluent_kafka.admin import AdminClient

    fresh_broker.start()
    raw = RawKafka(fresh_broker.bootstrap)
    member = Member(raw, group, "m1", topic_id_of(raw, topic))
    assert join(raw, group, "m1", topic).error_code == ErrorCode.none
    assert member.fetch() == []  # the share-partition's state is stored
    raw.close()
    assert fresh_broker.stop() == 0
    fresh_broker.start()
    raw = RawKafka(fresh_broker.bootstrap)
    try:
        # no member came back: the group is known only from what was stored
        listed = {g.group_id: g for g in raw.request(16, 5, states_filter=(), types_filter=("share",)).groups}
        assert (listed[group].group_type, listed[group].group_state, listed[group].protocol_type) == \
            ("share", "Empty", "share")
        assert not raw.request(16, 5, states_filter=(), types_filter=("classic",)).groups
        (described,) = raw.request(77, 1, group_ids=(group,), include_authorized_operations=False).groups
        assert (described.error_code, described.group_state, described.members) == (ErrorCode.none, "Empty", ())
        admin = AdminClient({"bootstrap.servers": fresh_broker.bootstrap})
        # deleting it removes what was stored: it is no longer listed
        assert admin.delete_consumer_groups([group])[group].result(10) is None
        assert group not in {g.group_id for g in raw.request(16, 5, states_filter=(), types_filter=()).groups}
    finally:
        raw.close()
