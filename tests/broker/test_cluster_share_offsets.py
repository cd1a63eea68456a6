"""AlterShareGroupOffsets / DeleteShareGroupOffsets on the group's coordinator apply on
the broker that owns the partition, even while it still holds the share-partition of a
member that went away without closing its share session."""

from __future__ import annotations

import uuid

import pytest

from tests.pulsar_admin.conftest import wait_until

from .cluster_harness import Cluster

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from tests.kafka.raw import RawKafka  # noqa: E402
from tests.kafka.test_share_group_offsets import alter, delete_offsets, leave  # noqa: E402
from tests.kafka.test_share_groups_wire import ACCEPT, Member, join, topic_id_of  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(2).start()
    yield cluster
    cluster.stop()


def bootstrap(node) -> str:
    return f"{node.address.kafka_host}:{node.address.kafka_port}"


def owner_of(cluster: Cluster, stream: str) -> int:
    """Index of the broker that loaded ``stream``."""
    return wait_until(lambda: [i for i, n in enumerate(cluster.nodes) if stream in n.registry.topics], 20, 0.05)[0]


def group_coordinated_by(cluster: Cluster, broker: int) -> str:
    want = cluster.nodes[broker].membership.name
    while True:
        group = f"sg-{uuid.uuid4().hex[:8]}"
        if cluster.nodes[0].placement.preferred("group:" + group).name == want:
            return group


def test_share_offsets_altered_and_deleted_elsewhere_apply_on_the_owner(cluster):
    topic = f"so-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap(cluster.nodes[0])})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap(cluster.nodes[0])})
    for i in range(10):
        producer.produce(topic, b"r%d" % i)
    assert producer.flush(20) == 0
    stream = str(cluster.run(cluster.nodes[0].kafka.catalog.stream_name(topic, 0)))
    owner = owner_of(cluster, stream)
    coordinator_index = 1 - owner
    group = group_coordinated_by(cluster, coordinator_index)
    earliest = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([earliest], request_timeout=15)[earliest].result(15)

    leader = RawKafka(bootstrap(cluster.nodes[owner]))
    coordinator = RawKafka(bootstrap(cluster.nodes[coordinator_index]))
    try:
        topic_id = topic_id_of(leader, topic)
        assert join(coordinator, group, "m1", topic).error_code == ErrorCode.none
        m1 = Member(leader, group, "m1", topic_id)
        assert sorted(o for o, _ in m1.fetch_until(10)) == list(range(10))
        m1.ack([(0, 3, (ACCEPT,) * 4)])
        # m1 leaves the group but never closes its share session: the owner keeps its
        # share-partition loaded, with records 4-9 locked to m1.
        leave(coordinator, group, "m1")

        resp = alter(coordinator, group, topic, 7)
        assert resp.error_code == ErrorCode.none and resp.responses[0].partitions[0].error_code == ErrorCode.none
        # The owner hears of the write through the metadata plane's notifications.
        stream_id = cluster.nodes[owner].registry.topics[stream].stream_id
        wait_until(lambda: (group, stream_id) in cluster.nodes[owner].kafka.share_groups.suspects, 20, 0.05)
        assert join(coordinator, group, "m2", topic).error_code == ErrorCode.none
        m2 = Member(leader, group, "m2", topic_id)
        assert sorted(o for o, _ in m2.fetch_until(3)) == [7, 8, 9]  # from the altered start, none locked
        m2.ack([(7, 9, (ACCEPT,) * 3)])
        leave(coordinator, group, "m2")

        resp = delete_offsets(coordinator, group, topic)
        assert resp.error_code == ErrorCode.none and resp.responses[0].error_code == ErrorCode.none
        assert join(coordinator, group, "m3", topic).error_code == ErrorCode.none
        m3 = Member(leader, group, "m3", topic_id)
        # The state is gone: the group starts afresh, at the earliest record.
        assert sorted(o for o, _ in m3.fetch_until(10)) == list(range(10))
        m3.ack([], close=True)
        leave(coordinator, group, "m3")
    finally:
        leader.close()
        coordinator.close()
