"""Share group offsets (KIP-932): DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets, DeleteGroups of a share group and ListGroups' type filter,
over the wire against a real standalone."""

from __future__ import annotations

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from nereus.codec.kafka import make, nested

from .raw import RawKafka
from .test_share_groups_wire import ACCEPT, Member, join, produce, topic_id_of


def describe(raw: RawKafka, group: str, topic: str | None = None, partitions=(0,)):
    cls = load_request_schema(90, 1)
    topics = None if topic is None else (
        make(nested(cls, "DescribeShareGroupOffsetsRequestTopic"), topic_name=topic, partitions=partitions),)
    (g,) = raw.request(90, 1, groups=(make(nested(cls, "DescribeShareGroupOffsetsRequestGroup"), group_id=group,
                                           topics=topics),)).groups
    assert g.error_code == ErrorCode.none, g
    return {(t.topic_name, p.partition_index): (p.start_offset, p.lag, p.error_code)
            for t in g.topics for p in t.partitions}


def alter(raw: RawKafka, group: str, topic: str, offset: int):
    cls = load_request_schema(91, 0)
    part = make(nested(cls, "AlterShareGroupOffsetsRequestPartition"), partition_index=0, start_offset=offset)
    return raw.request(91, 0, group_id=group, topics=(
        make(nested(cls, "AlterShareGroupOffsetsRequestTopic"), topic_name=topic, partitions=(part,)),))


def delete_offsets(raw: RawKafka, group: str, topic: str):
    cls = load_request_schema(92, 0)
    return raw.request(92, 0, group_id=group, topics=(
        make(nested(cls, "DeleteShareGroupOffsetsRequestTopic"), topic_name=topic),))


def leave(raw: RawKafka, group: str, member: str) -> None:
    resp = raw.request(76, 1, group_id=group, member_id=member, member_epoch=-1, rack_id=None,
                       subscribed_topic_names=None)
    assert resp.error_code == ErrorCode.none


def listed(raw: RawKafka, *types: str) -> set[str]:
    return {g.group_id for g in raw.request(16, 5, states_filter=(), types_filter=types).groups}


def test_describe_alter_and_delete_share_group_offsets(broker, topic, group):
    raw = RawKafka(broker.bootstrap)
    try:
        topic_id = topic_id_of(raw, topic)
        assert join(raw, group, "m1", topic).error_code == ErrorCode.none
        m1 = Member(raw, group, "m1", topic_id)
        assert m1.fetch() == []  # the group starts at the end of the partition
        produce(broker, topic, 10)
        assert len(m1.fetch_until(10)) == 10
        m1.ack([(0, 3, (ACCEPT,) * 4)])
        assert describe(raw, group) == {(topic, 0): (4, 6, ErrorCode.none)}
        assert group in listed(raw, "share") and group not in listed(raw, "consumer", "classic")

        assert alter(raw, group, topic, 7).error_code == ErrorCode.non_empty_group
        assert delete_offsets(raw, group, topic).error_code == ErrorCode.non_empty_group
        m1.ack([], close=True)
        leave(raw, group, "m1")

        resp = alter(raw, group, topic, 7)
        assert resp.error_code == ErrorCode.none and resp.responses[0].partitions[0].error_code == ErrorCode.none
        assert describe(raw, group, topic) == {(topic, 0): (7, 3, ErrorCode.none)}
        missing = alter(raw, group, "no-such-topic", 1).responses[0].partitions[0].error_code
        assert missing == ErrorCode.unknown_topic_or_partition
        assert join(raw, group, "m2", topic).error_code == ErrorCode.none
        m2 = Member(raw, group, "m2", topic_id)
        assert sorted(o for o, _ in m2.fetch_until(3)) == [7, 8, 9]  # from the altered start on
        m2.ack([], close=True)
        leave(raw, group, "m2")

        resp = delete_offsets(raw, group, topic)
        assert resp.error_code == ErrorCode.none and resp.responses[0].error_code == ErrorCode.none
        assert describe(raw, group) == {}
        assert describe(raw, group, topic) == {(topic, 0): (-1, -1, ErrorCode.none)}
    finally:
        raw.close()


def test_delete_groups_deletes_a_share_group(broker, topic, group):
    raw = RawKafka(broker.bootstrap)
    try:
        topic_id = topic_id_of(raw, topic)
        assert join(raw, group, "m1", topic).error_code == ErrorCode.none
        Member(raw, group, "m1", topic_id).fetch()  # the share-partition (its subscription) exists now

        def delete() -> ErrorCode:
            return raw.request(42, 2, groups_names=(group,)).results[0].error_code

        assert delete() == ErrorCode.non_empty_group
        leave(raw, group, "m1")
        assert describe(raw, group) == {(topic, 0): (0, 0, ErrorCode.none)}
        assert delete() == ErrorCode.none
        assert describe(raw, group) == {} and group not in listed(raw)
        assert delete() == ErrorCode.group_id_not_found
    finally:
        raw.close()


def test_delivery_counts_survive_a_killed_broker_up_to_the_delivery_limit(fresh_broker, topic, group):
    from .test_share_groups import set_broker_configs

    fresh_broker.start()
    set_broker_configs(fresh_broker, group_share_delivery_count_limit="2")
    raw = RawKafka(fresh_broker.bootstrap)
    try:
        topic_id = topic_id_of(raw, topic)
        m1 = Member(raw, group, "m1", topic_id)
        assert m1.fetch() == []
        produce(fresh_broker, topic, 3)
        assert sorted(m1.fetch_until(3)) == [(0, 1), (1, 1), (2, 1)]
        m1.ack([(0, 0, (ACCEPT,))])
    finally:
        raw.close()
    for delivered in (2, None):  # killed holding the records: the next delivery counts on, up to the limit
        fresh_broker.kill()
        fresh_broker.start()
        raw = RawKafka(fresh_broker.bootstrap)
        try:
            again = Member(raw, group, "m1", topic_id)
            if delivered is not None:
                assert sorted(again.fetch_until(2)) == [(1, delivered), (2, delivered)]
            else:  # held at the limit when the broker died: archived, as a lock lost at the limit is
                assert again.fetch(wait_ms=300) == []
                assert describe(raw, group) == {(topic, 0): (3, 0, ErrorCode.none)}
        finally:
            raw.close()


def test_share_fetch_and_acknowledge_v2_renew_locks(broker, topic, group):
    raw = RawKafka(broker.bootstrap)
    try:
        topic_id = topic_id_of(raw, topic)
        assert join(raw, group, "m1", topic).error_code == ErrorCode.none
        m1 = Member(raw, group, "m1", topic_id)
        assert m1.fetch() == []
        produce(broker, topic, 3)
        assert len(m1.fetch_until(3)) == 3

        def batches(cls, part_name, topic_name, types):
            batch = make(nested(cls, "AcknowledgementBatch"), first_offset=0, last_offset=2, acknowledge_types=types)
            part = make(nested(cls, part_name), partition_index=0, acknowledgement_batches=(batch,))
            return (make(nested(cls, topic_name), topic_id=topic_id, partitions=(part,)),)

        def ack_v2(types, renew: bool):
            cls = load_request_schema(79, 2)
            resp = raw.request(79, 2, group_id=group, member_id="m1", share_session_epoch=m1.epoch, is_renew_ack=renew,
                               topics=batches(cls, "AcknowledgePartition", "AcknowledgeTopic", types))
            m1.epoch += 1
            return resp.responses[0].partitions[0].error_code

        assert ack_v2((4,), renew=False) == ErrorCode.invalid_request  # RENEW needs is_renew_ack
        assert ack_v2((4,), renew=True) == ErrorCode.none
        produce(broker, topic, 2)
        cls = load_request_schema(78, 2)
        import datetime
        resp = raw.request(78, 2, group_id=group, member_id="m1", share_session_epoch=m1.epoch,
                           max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 20,
                           max_records=500, batch_size=500, share_acquire_mode=1, is_renew_ack=True,
                           topics=batches(cls, "FetchPartition", "FetchTopic", (4,)), forgotten_topics_data=())
        m1.epoch += 1
        assert resp.error_code == ErrorCode.none
        (part,) = resp.responses[0].partitions
        assert part.acknowledge_error_code == ErrorCode.none and part.acquired_records == ()  # renewing acquires none
        assert ack_v2((ACCEPT,), renew=False) == ErrorCode.none  # still held: the renewals kept the locks
        assert sorted(o for o, _ in m1.fetch_until(2)) == [3, 4]
        m1.ack([], close=True)
        leave(raw, group, "m1")
    finally:
        raw.close()
