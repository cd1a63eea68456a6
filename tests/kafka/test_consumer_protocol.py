"""KIP-848's consumer group protocol (``group.protocol=consumer``) with confluent-kafka against a standalone."""

from __future__ import annotations

import datetime

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from .conftest import wait_until
from .raw import RawKafka
from .test_group_membership import Tracked, _poll_all, _settled, _topic

CONSUMER = {"group.protocol": "consumer"}


def _without_classic_settings(bootstrap: str, group: str, topic: str) -> Tracked:
    member = Tracked.__new__(Tracked)
    from confluent_kafka import Consumer

    member.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                "enable.auto.commit": False, **CONSUMER})
    member.assigned, member.revoked = [], []
    member.consumer.subscribe([topic], on_assign=member._on_assign, on_revoke=member._on_revoke)
    return member


def test_server_side_assignment_revokes_only_what_moves_and_commits_with_member_epochs(broker, topic, group):
    _topic(broker.bootstrap, topic, 4)
    first = _without_classic_settings(broker.bootstrap, group, topic)
    wait_until(lambda: _settled([first], 4, 4), timeout=30)
    second = _without_classic_settings(broker.bootstrap, group, topic)
    wait_until(lambda: _settled([first, second], 4, 2), timeout=40)
    kept = first.owned()
    assert set().union(*first.revoked) == {0, 1, 2, 3} - kept  # only what moved was revoked
    assert second.revoked == []

    # offsets commit against the member epoch
    first.consumer.commit(offsets=[TopicPartition(topic, p, 1) for p in kept], asynchronous=False)
    committed = first.consumer.committed([TopicPartition(topic, p) for p in kept], timeout=10)
    assert {tp.offset for tp in committed} == {1}

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(10)
    assert len(described.members) == 2
    assert sorted(p.partition for m in described.members for p in m.assignment.topic_partitions) == [0, 1, 2, 3]

    # a group is either classic or consumer: a classic JoinGroup is refused
    raw = RawKafka(broker.bootstrap)
    try:
        joined = raw.request(11, 5, group_id=group, session_timeout=datetime.timedelta(seconds=10),
                             rebalance_timeout=datetime.timedelta(seconds=10), member_id="", group_instance_id=None,
                             protocol_type="consumer", protocols=())
    finally:
        raw.close()
    assert joined.error_code.value == 23  # INCONSISTENT_GROUP_PROTOCOL

    second.consumer.close()  # leaves with epoch -1: the first member gets everything back
    wait_until(lambda: _settled([first], 4, 4), timeout=30)
    _poll_all(first)
    first.consumer.close()


def _beat(raw: RawKafka, group: str, member: str, epoch: int, topic: str | None = None, owned=None):
    from kio.index import load_request_schema

    from nereus.codec.kafka import make, nested

    cls = load_request_schema(68, 0)
    tps = None if owned is None else tuple(
        make(nested(cls, "TopicPartitions"), topic_id=tid, partitions=tuple(sorted(ps))) for tid, ps in owned.items())
    return raw.request(68, 0, group_id=group, member_id=member, member_epoch=epoch, instance_id=None, rack_id=None,
                       rebalance_timeout=datetime.timedelta(seconds=30),
                       subscribed_topic_names=(topic,) if topic else None, server_assignor=None,
                       topic_partitions=tps)


def _owned(resp) -> dict:
    return {tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions} if resp.assignment else {}


def _commit(raw: RawKafka, version: int, group: str, member: str, epoch: int, topic: str):
    from kio.index import load_request_schema

    from nereus.codec.kafka import make, nested

    cls = load_request_schema(8, version)
    part = make(nested(cls, "OffsetCommitRequestPartition"), partition_index=0, committed_offset=1,
                committed_leader_epoch=-1, committed_metadata=None)
    resp = raw.request(8, version, group_id=group, generation_id_or_member_epoch=epoch, member_id=member,
                       group_instance_id=None, topics=(make(nested(cls, "OffsetCommitRequestTopic"), name=topic,
                                                            partitions=(part,)),))
    return resp.topics[0].partitions[0].error_code.value


def test_configured_timings_lost_answers_and_member_epoch_commits(tmp_path, topic, group):
    from tests.standalone_process import Standalone

    conf = tmp_path / "broker.conf"
    conf.write_text("group.consumer.heartbeat.interval.ms=400\ngroup.consumer.session.timeout.ms=8000\n")
    server = Standalone(tmp_path / "data", extra_args=["--compaction-interval", "0", "--config", str(conf)])
    server.start()
    raw = RawKafka(server.bootstrap)
    try:
        _topic(server.bootstrap, topic, 4)
        a = _beat(raw, group, "", 0, topic)
        assert a.error_code.value == 0 and a.heartbeat_interval == datetime.timedelta(milliseconds=400)
        a_id, b = a.member_id, _beat(raw, group, "", 0, topic)
        owned = _owned(a)
        a2 = _beat(raw, group, a_id, a.member_epoch, owned=owned)  # told to give up half, same epoch
        assert a2.member_epoch == a.member_epoch
        kept = _owned(a2)
        moved = _beat(raw, group, a_id, a.member_epoch, owned=kept)
        assert moved.error_code.value == 0 and moved.member_epoch > a.member_epoch
        # the answer that moved the member on was lost: it asks again at its previous epoch
        again = _beat(raw, group, a_id, a.member_epoch, owned=kept)
        assert again.error_code.value == 0 and again.member_epoch == moved.member_epoch and _owned(again) == kept
        assert _beat(raw, group, a_id, a.member_epoch, owned=owned).error_code.value == 110  # FENCED_MEMBER_EPOCH
        # OffsetCommit v9 checks the member epoch; consumer-protocol members must use v9+
        assert _commit(raw, 9, group, a_id, moved.member_epoch, topic) == 0
        assert _commit(raw, 9, group, a_id, a.member_epoch, topic) == 113  # STALE_MEMBER_EPOCH
        assert _commit(raw, 9, group, "nobody", moved.member_epoch, topic) == 25  # UNKNOWN_MEMBER_ID
        assert _commit(raw, 8, group, a_id, moved.member_epoch, topic) == 35  # UNSUPPORTED_VERSION
        # b stops heartbeating: it leaves after the configured 8 s session (long enough for a loaded
        # machine to run the steps above within it), a stays while it beats

        def b_gone():
            _beat(raw, group, a_id, moved.member_epoch, owned=kept)
            described = raw.request(69, 0, group_ids=(group,), include_authorized_operations=False).groups[0]
            return b.member_id not in {m.member_id for m in described.members}

        wait_until(b_gone, timeout=40, interval=0.3)
    finally:
        raw.close()
        server.kill()


def _fetch_v9(raw: RawKafka, groups):
    """OffsetFetch v9: ``groups`` as (group id, member id, member epoch, topic); each group's (error, offsets)."""
    from kio.index import load_request_schema

    from nereus.codec.kafka import make, nested

    cls = load_request_schema(9, 9)
    wanted = tuple(make(nested(cls, "OffsetFetchRequestGroup"), group_id=g, member_id=m, member_epoch=e,
                        topics=(make(nested(cls, "OffsetFetchRequestTopics"), name=t, partition_indexes=(0, 1)),))
                   for g, m, e, t in groups)
    resp = raw.request(9, 9, groups=wanted, require_stable=True)
    return [(g.error_code.value, {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions})
            for g in resp.groups]


def test_batched_offset_fetch_checks_the_member_epoch(broker, topic, group):
    _topic(broker.bootstrap, topic, 2)
    raw = RawKafka(broker.bootstrap)
    try:
        (offset_fetch,) = [k for k in raw.request(18, 3, client_software_name="t", client_software_version="1").api_keys
                           if k.api_key == 9]
        assert offset_fetch.max_version >= 9
        joined = _beat(raw, group, "", 0, topic)
        member, epoch = joined.member_id, joined.member_epoch
        assert _commit(raw, 9, group, member, epoch, topic) == 0
        other = group + "-other"
        assert _fetch_v9(raw, [(group, member, epoch, topic), (other, None, -1, topic)]) == [
            (0, {0: 1, 1: -1}), (0, {0: -1, 1: -1})]
        assert _fetch_v9(raw, [(group, member, epoch - 1, topic)]) == [(113, {})]  # STALE_MEMBER_EPOCH
        assert _fetch_v9(raw, [(group, "nobody", epoch, topic)]) == [(25, {})]  # UNKNOWN_MEMBER_ID
        assert _fetch_v9(raw, [(group, None, -1, topic)]) == [(0, {0: 1, 1: -1})]  # an admin client
        assert _beat(raw, group, member, -1).error_code.value == 0
    finally:
        raw.close()


def test_a_group_s_own_session_and_heartbeat_settings(broker, topic, group):
    """consumer.session.timeout.ms and consumer.heartbeat.interval.ms set on the group (a GROUP
    resource) override the broker's for its members."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("consumer.session.timeout.ms", "4000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("consumer.heartbeat.interval.ms", "700", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=20)[res].result(20)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.GROUP, group)])
    configs = next(iter(described.values())).result(20)
    assert (configs["consumer.session.timeout.ms"].value, configs["consumer.heartbeat.interval.ms"].value) == (
        "4000", "700")
    _topic(broker.bootstrap, topic, 2)
    raw = RawKafka(broker.bootstrap)
    try:
        member = _beat(raw, group, "", 0, topic)
        assert member.error_code.value == 0
        assert member.heartbeat_interval == datetime.timedelta(milliseconds=700)

        def gone():
            described = raw.request(69, 0, group_ids=(group,), include_authorized_operations=False).groups[0]
            return member.member_id not in {m.member_id for m in described.members}
        wait_until(gone, timeout=30, interval=0.3)  # silent past its group's 4 s, not the broker's 45 s
    finally:
        raw.close()
