"""The Kafka protocol in a cluster: brokers, leaders, coordinators, fetch from the nearest zone.

Three in-process ``KafkaService``s share one embedded metadata engine and one object
store; each sees the same fixed three-broker cluster (zones a, a, b) through a test
``Placement``, whose answers a test can pin (``Cluster.pin``). Blocking clients
(the raw codec client, confluent-kafka) run in threads while the services run on
the test's event loop.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from nereus.codec.kafka import make, nested
from nereus.codec.kafka.protocol import request_schema
from nereus.codec.kafka.records import Record, build_batch
from nereus.kafka.server import KafkaService
from nereus.kafka.server.data import fetch as fetch_handler
from nereus.meta import open_engine
from nereus.objstore import open_object_store
from nereus.storage import StreamStorage
from nereus.topics import BrokerAddress, NotOwner, Placement, TopicRegistry

from .raw import RawKafka

NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE, NOT_COORDINATOR = 6, 5, 16
INVALID_REPLICATION_FACTOR, INVALID_REPLICA_ASSIGNMENT = 38, 39
ZONES = ("a", "a", "b")


class Cluster:
    """The brokers every test placement describes; keys go where ``pin`` says, else by a hash."""

    def __init__(self) -> None:
        self.addresses: list[BrokerAddress] = []
        self.services: list[KafkaService] = []
        self.pinned: dict[str, int] = {}  # key -> node id
        self.dead: set[str] = set()  # topics whose owner just died (no owner can be named)
        self.draining: set[int] = set()  # brokers that take no new topics (still serving theirs)

    def pin(self, key: str, node: int) -> None:
        self.pinned[key] = node

    def walk(self, key: str) -> list[BrokerAddress]:
        order = sorted(self.addresses, key=lambda a: hashlib.sha256(f"{key}|{a.name}".encode()).digest())
        if key in self.pinned:
            order.sort(key=lambda a: a.node_id != self.pinned[key])
        return order

    def bootstrap(self, node: int) -> str:
        return f"127.0.0.1:{self.services[node].port}"


class FixedPlacement(Placement):
    """One broker's view of the fixed cluster."""

    def __init__(self, cluster: Cluster, local: BrokerAddress) -> None:
        super().__init__(local)
        self.cluster = cluster

    def brokers(self) -> list[BrokerAddress]:
        return [a for a in self.cluster.addresses if a.node_id not in self.cluster.draining]

    def preferred(self, key: str, zone: str | None = None) -> BrokerAddress:
        walk = self.cluster.walk(key)
        return next((a for a in walk if a.zone == zone), walk[0])

    async def owner(self, topic: str) -> BrokerAddress:
        if topic in self.cluster.dead:
            raise NotOwner(f"{topic}: its owner is gone")
        return self.preferred(topic)

    async def lookup(self, topic: str, *, authoritative: bool = False) -> tuple[BrokerAddress, bool]:
        return await self.owner(topic), True

    async def claim(self, topic: str) -> None:
        owner = await self.owner(topic)
        if owner.name != self.local.name:
            raise NotOwner(f"{topic} is served by {owner.name}", owner)

    def owns(self, topic: str) -> bool:
        return self.preferred(topic).name == self.local.name


@pytest.fixture
async def cluster():
    engine = open_engine(None, shards=2)
    objects = open_object_store("memory://")
    c = Cluster()
    parts = []
    for node, zone in enumerate(ZONES):
        meta = engine.client(namespace="default")
        storage = StreamStorage(meta, objects, node_id=f"b{node}")
        registry = TopicRegistry(storage, meta)
        service = KafkaService(storage, meta, registry, port=0, node_id=node)
        await service.start()
        address = BrokerAddress(f"b{node}", node, zone, "", "127.0.0.1", service.port, "")
        registry.placement = FixedPlacement(c, address)
        c.addresses.append(address)
        c.services.append(service)
        parts.append((service, registry, storage, meta))
    yield c
    for service, registry, storage, meta in parts:
        await service.stop()
        await registry.close()
        await storage.close()
        await meta.close()
    await engine.close()


@pytest.fixture
def fetches(monkeypatch):
    """(node id, record bytes, preferred read replica) of each partition a Fetch answered."""
    served = []
    original = fetch_handler._fetch_partition

    async def counting(ctx, *args, **kwargs):
        result = await original(ctx, *args, **kwargs)
        answer = result[0]
        served.append((ctx.routing.local.node_id, len(answer.records or b""), answer.preferred_read_replica))
        return result

    monkeypatch.setattr(fetch_handler, "_fetch_partition", counting)
    return served


def stream(topic: str, index: int = 0) -> str:
    return f"persistent://public/default/{topic}-partition-{index}"


def new_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def call(cluster: Cluster, node: int, api_key: int, version: int, **fields):
    """One request to broker ``node`` over a fresh connection (blocking client in a thread)."""

    def run():
        raw = RawKafka(cluster.bootstrap(node))
        try:
            return raw.request(api_key, version, **fields)
        finally:
            raw.close()

    return await asyncio.to_thread(run)


async def produce(cluster: Cluster, node: int, topic: str, count: int = 3):
    def run():
        raw = RawKafka(cluster.bootstrap(node))
        try:
            records = [Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i) for i in range(count)]
            return raw.produce(topic, 0, build_batch(records))
        finally:
            raw.close()

    return await asyncio.to_thread(run)


async def fetch(cluster: Cluster, node: int, topic: str, rack: str, version: int = 12):
    cls = request_schema(1, version)
    part = make(nested(cls, "FetchPartition"), partition=0, current_leader_epoch=-1, fetch_offset=0,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
    resp = await call(cluster, node, 1, version, cluster_id=None, replica_id=-1,
                      max_wait=datetime.timedelta(milliseconds=0), min_bytes=1, max_bytes=1 << 20,
                      isolation_level=0, session_id=0, session_epoch=-1,
                      topics=(make(nested(cls, "FetchTopic"), topic=topic, partitions=(part,)),),
                      forgotten_topics_data=(), rack_id=rack)
    return resp.responses[0].partitions[0]


async def metadata(cluster: Cluster, node: int, topics: list[str], version: int = 12):
    cls = request_schema(3, version)
    wanted = tuple(make(nested(cls, "MetadataRequestTopic"), name=t, topic_id=None) for t in topics)
    return await call(cluster, node, 3, version, topics=wanted, allow_auto_topic_creation=False,
                      include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


# -- metadata ------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 9, 12])
async def test_metadata_lists_every_broker_and_each_partitions_owner(cluster, version):
    topic = new_name("meta")
    await cluster.services[0].catalog.create(topic, 4)
    for index, node in enumerate([2, 1, 0, 2]):
        cluster.pin(stream(topic, index), node)
    cluster.dead.add(stream(topic, 3))  # its owner died: no leader until the record expires
    for asked in range(3):
        resp = await metadata(cluster, asked, [topic], version)
        brokers = sorted((b.node_id, b.host, b.port, b.rack) for b in resp.brokers)
        assert brokers == [(n, "127.0.0.1", cluster.services[n].port, ZONES[n]) for n in range(3)]
        assert resp.controller_id == 0
        parts = sorted(resp.topics[0].partitions, key=lambda p: p.partition_index)
        assert [(p.error_code, p.leader_id) for p in parts] == [(0, 2), (0, 1), (0, 0), (LEADER_NOT_AVAILABLE, -1)]
        # created without a replication factor: every live broker is a replica, the leader first
        assert [tuple(p.replica_nodes) for p in parts[:3]] == [(2, 0, 1), (1, 0, 2), (0, 1, 2)]
        assert [tuple(p.isr_nodes) for p in parts[:3]] == [(2, 0, 1), (1, 0, 2), (0, 1, 2)]


async def test_replication_factor_and_assignments_against_the_live_brokers(cluster):
    cls = request_schema(19, 7)

    async def create(topic, partitions=-1, factor=-1, assignments=()):
        assigned = tuple(make(nested(cls, "CreatableReplicaAssignment"), partition_index=i, broker_ids=ids)
                         for i, ids in enumerate(assignments))
        entry = make(nested(cls, "CreatableTopic"), name=topic, num_partitions=partitions,
                     replication_factor=factor, assignments=assigned, configs=())
        resp = await call(cluster, 1, 19, 7, topics=(entry,), timeout=datetime.timedelta(seconds=5),
                          validate_only=False)
        return resp.topics[0]

    beyond = new_name("rf")
    more_than_brokers = await create(beyond, 1, 4)  # durability is the object store's: any factor is taken
    assert (more_than_brokers.error_code, more_than_brokers.replication_factor) == (0, 4)
    too_many = await create(new_name("rf"), 1, 33)
    assert too_many.error_code == INVALID_REPLICATION_FACTOR and "maximum (32" in too_many.error_message
    bad = await create(new_name("rf"), assignments=[[0, 1], [1, 5]])
    assert bad.error_code == INVALID_REPLICA_ASSIGNMENT
    topic = new_name("rf")
    answer = await create(topic, 2, 2)
    assert (answer.error_code, answer.num_partitions, answer.replication_factor) == (0, 2, 2)
    assigned = new_name("rf")
    answer = await create(assigned, assignments=[[0, 2, 1], [2, 1, 0]])
    assert (answer.error_code, answer.num_partitions, answer.replication_factor) == (0, 2, 3)
    for index, node in enumerate([2, 0]):
        cluster.pin(stream(topic, index), node)
        cluster.pin(stream(assigned, index), node)
    cluster.pin(stream(beyond, 0), 1)
    for asked in range(3):
        resp = await metadata(cluster, asked, [topic, assigned, beyond])
        by_name = {t.name: sorted(t.partitions, key=lambda p: p.partition_index) for t in resp.topics}
        assert [(p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) for p in by_name[topic]] == \
            [(2, (2, 0), (2, 0)), (0, (0, 1), (0, 1))]
        # as assigned, in order (Kafka's preferred leader first), whoever leads now
        assert [(p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes)) for p in by_name[assigned]] == \
            [(2, (0, 2, 1), (0, 2, 1)), (0, (2, 1, 0), (2, 1, 0))]
        # more replicas asked for than there are brokers: every live broker, the leader first
        assert [tuple(p.replica_nodes) for p in by_name[beyond]] == [(1, 0, 2)]


async def test_a_draining_owner_is_listed_while_it_leads(cluster):
    topic, other = new_name("drain"), new_name("drain")
    await cluster.services[0].catalog.create(topic, 1)
    await cluster.services[0].catalog.create(other, 1)
    cluster.pin(stream(topic), 2)
    cluster.pin(stream(other), 1)
    cluster.draining.add(2)
    resp = await metadata(cluster, 0, [topic])
    assert sorted(b.node_id for b in resp.brokers) == [0, 1, 2]
    assert resp.topics[0].partitions[0].leader_id == 2
    resp = await metadata(cluster, 0, [other])
    assert sorted(b.node_id for b in resp.brokers) == [0, 1]


async def test_describe_cluster_lists_every_broker(cluster):
    resp = await call(cluster, 2, 60, 1, include_cluster_authorized_operations=False, endpoint_type=1)
    assert resp.error_code == 0 and resp.controller_id == 0
    assert sorted((b.broker_id, b.port, b.rack) for b in resp.brokers) == [
        (n, cluster.services[n].port, ZONES[n]) for n in range(3)]


async def test_the_leader_epoch_grows_when_the_owner_changes(cluster):
    topic = new_name("epoch")
    await cluster.services[0].catalog.create(topic, 1)
    cluster.pin(stream(topic), 0)
    assert (await produce(cluster, 0, topic)).error_code == 0
    epochs = [(await metadata(cluster, n, [topic])).topics[0].partitions[0].leader_epoch for n in range(3)]
    assert epochs[0] >= 1 and len(set(epochs)) == 1
    # A handoff: the old owner unloads the topic, the new one takes the append session.
    old = cluster.services[0].registry
    await old.unload(old.loaded(stream(topic)), "moved")
    cluster.pin(stream(topic), 1)
    assert (await produce(cluster, 1, topic)).error_code == 0
    after = [(await metadata(cluster, n, [topic])).topics[0].partitions[0].leader_epoch for n in range(3)]
    assert len(set(after)) == 1 and after[0] > epochs[0]
    batch = await fetch(cluster, 2, topic, rack="")
    assert batch.error_code == 0 and len(batch.records) > 0


async def test_offset_for_leader_epoch_on_a_non_owner_answers_the_current_end(cluster):
    topic = new_name("ofle")
    await cluster.services[0].catalog.create(topic, 1)
    cluster.pin(stream(topic), 0)
    assert (await produce(cluster, 0, topic)).error_code == 0
    assert len((await fetch(cluster, 2, topic, rack="")).records) > 0  # loaded on broker 2 for reads
    old = cluster.services[0].registry
    await old.unload(old.loaded(stream(topic)), "moved")
    cluster.pin(stream(topic), 1)
    assert (await produce(cluster, 1, topic, count=4)).error_code == 0
    epoch = (await metadata(cluster, 1, [topic])).topics[0].partitions[0].leader_epoch
    cls = request_schema(23, 4)
    asked = make(nested(cls, "OffsetForLeaderPartition"), partition=0, current_leader_epoch=epoch, leader_epoch=epoch)
    resp = await call(cluster, 2, 23, 4, replica_id=-1, topics=(
        make(nested(cls, "OffsetForLeaderTopic"), topic=topic, partitions=(asked,)),))
    answer = resp.topics[0].partitions[0]
    assert (answer.error_code, answer.leader_epoch, answer.end_offset) == (0, epoch, 7)


# -- produce -------------------------------------------------------------------------------
async def test_produce_on_a_non_owner_answers_not_leader_or_follower(cluster):
    topic = new_name("produce")
    await cluster.services[0].catalog.create(topic, 1)
    cluster.pin(stream(topic), 1)
    assert (await produce(cluster, 0, topic)).error_code == NOT_LEADER_OR_FOLLOWER
    assert (await produce(cluster, 2, topic)).error_code == NOT_LEADER_OR_FOLLOWER
    ok = await produce(cluster, 1, topic)
    assert ok.error_code == 0 and ok.base_offset == 0
    for node in range(3):  # and every broker serves the reads
        assert len((await fetch(cluster, node, topic, rack="")).records) > 0


# -- groups --------------------------------------------------------------------------------
async def test_find_coordinator_answers_the_rings_broker(cluster):
    groups = [new_name("g") for _ in range(3)]
    for node, group in enumerate(groups):
        cluster.pin("group:" + group, node)
    for asked in range(3):
        for node, group in enumerate(groups):
            single = await call(cluster, asked, 10, 3, key=group, key_type=0)
            assert (single.error_code, single.node_id, single.port) == (0, node, cluster.services[node].port)
        batched = await call(cluster, asked, 10, 4, key_type=0, coordinator_keys=tuple(groups))
        assert [(c.key, c.node_id, c.port) for c in batched.coordinators] == [
            (g, n, cluster.services[n].port) for n, g in enumerate(groups)]


async def test_group_requests_on_a_non_coordinator_answer_not_coordinator(cluster):
    group, topic = new_name("g"), new_name("t")
    await cluster.services[0].catalog.create(topic, 1)
    cluster.pin("group:" + group, 2)
    seconds = datetime.timedelta(seconds=10)
    join_cls, commit_cls, fetch_cls = request_schema(11, 5), request_schema(8, 7), request_schema(9, 7)
    join = await call(cluster, 0, 11, 5, group_id=group, session_timeout=seconds, rebalance_timeout=seconds,
                      member_id="m", group_instance_id=None, protocol_type="consumer",
                      protocols=(make(nested(join_cls, "JoinGroupRequestProtocol"), name="range", metadata=b""),))
    assert join.error_code == NOT_COORDINATOR
    sync = await call(cluster, 0, 14, 3, group_id=group, generation_id=1, member_id="m", group_instance_id=None,
                      assignments=())
    assert sync.error_code == NOT_COORDINATOR
    beat = await call(cluster, 1, 12, 3, group_id=group, generation_id=1, member_id="m", group_instance_id=None)
    assert beat.error_code == NOT_COORDINATOR
    leave = await call(cluster, 1, 13, 3, group_id=group,
                       members=(make(nested(request_schema(13, 3), "MemberIdentity"), member_id="m",
                                     group_instance_id=None),))
    assert leave.error_code == NOT_COORDINATOR
    commit_part = make(nested(commit_cls, "OffsetCommitRequestPartition"), partition_index=0, committed_offset=5,
                       committed_leader_epoch=-1, committed_metadata=None)
    commit = await call(cluster, 0, 8, 7, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                        group_instance_id=None,
                        topics=(make(nested(commit_cls, "OffsetCommitRequestTopic"), name=topic,
                                     partitions=(commit_part,)),))
    assert commit.topics[0].partitions[0].error_code == NOT_COORDINATOR
    wanted = (make(nested(fetch_cls, "OffsetFetchRequestTopic"), name=topic, partition_indexes=(0,)),)
    fetched = await call(cluster, 0, 9, 7, group_id=group, topics=wanted, require_stable=False)
    assert fetched.error_code == NOT_COORDINATOR
    v1 = await call(cluster, 0, 9, 1, group_id=group, topics=(
        make(nested(request_schema(9, 1), "OffsetFetchRequestTopic"), name=topic, partition_indexes=(0,)),))
    assert v1.topics[0].partitions[0].error_code == NOT_COORDINATOR
    described = await call(cluster, 1, 15, 5, groups=(group,), include_authorized_operations=False)
    assert described.groups[0].error_code == NOT_COORDINATOR
    deleted = await call(cluster, 1, 42, 2, groups_names=(group,))
    assert deleted.results[0].error_code == NOT_COORDINATOR
    # The coordinator itself answers: the commit is stored and read back there.
    commit = await call(cluster, 2, 8, 7, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                        group_instance_id=None,
                        topics=(make(nested(commit_cls, "OffsetCommitRequestTopic"), name=topic,
                                     partitions=(commit_part,)),))
    assert commit.topics[0].partitions[0].error_code == 0
    fetched = await call(cluster, 2, 9, 7, group_id=group, topics=wanted, require_stable=False)
    assert fetched.error_code == 0 and fetched.topics[0].partitions[0].committed_offset == 5


async def test_a_group_the_ring_moves_away_is_dropped(cluster):
    group = new_name("g")
    cluster.pin("group:" + group, 0)
    first = cluster.services[0].coordinator
    await first.group(group)  # loaded here, as a request would
    assert group in first.groups
    cluster.pin("group:" + group, 1)
    beat = await call(cluster, 0, 12, 3, group_id=group, generation_id=1, member_id="m", group_instance_id=None)
    assert beat.error_code == NOT_COORDINATOR and group not in first.groups
    # A group nobody asks about is dropped by the next expiry pass.
    cluster.pin("group:" + group, 0)
    await first.group(group)
    cluster.pin("group:" + group, 2)
    first.expire()
    assert group not in first.groups


# -- fetch from the nearest zone (KIP-392) ---------------------------------------------------
@pytest.mark.parametrize("version", [11, 12])
async def test_a_consumer_of_another_zone_is_sent_to_a_broker_of_its_zone(cluster, version):
    topic = new_name("rack")
    await cluster.services[0].catalog.create(topic, 1)
    cluster.pin(stream(topic), 1)
    assert (await produce(cluster, 1, topic)).error_code == 0
    redirected = await fetch(cluster, 1, topic, rack="b", version=version)
    assert (redirected.error_code, redirected.preferred_read_replica, len(redirected.records)) == (0, 2, 0)
    assert redirected.high_watermark == 3
    for node, rack in ((1, "a"), (0, "a"), (2, "b"), (1, ""), (1, "c")):  # same zone, none, a zone without brokers
        served = await fetch(cluster, node, topic, rack=rack, version=version)
        assert served.preferred_read_replica == -1 and len(served.records) > 0, (node, rack)
    old = await fetch(cluster, 1, topic, rack="", version=10)  # before KIP-392: no rack, served
    assert len(old.records) > 0


async def test_confluent_consumer_with_client_rack_reads_from_its_zone(cluster, fetches):
    topic, group = new_name("rack"), new_name("g")
    await cluster.services[0].catalog.create(topic, 1)
    cluster.pin(stream(topic), 1)
    cluster.pin("group:" + group, 2)  # neither the bootstrap broker nor the leader
    values = [b"m%d" % i for i in range(30)]

    def produce_and_consume():
        producer = Producer({"bootstrap.servers": cluster.bootstrap(0), "linger.ms": 5})
        for value in values:
            producer.produce(topic, value=value)
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap(0), "group.id": group, "client.rack": "b",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        got = []
        try:
            deadline = 60
            while len(got) < len(values) and deadline > 0:
                msg = consumer.poll(0.5)
                deadline -= 0.5
                if msg is not None and msg.error() is None:
                    got.append(msg.value())
            consumer.commit(asynchronous=False)
            committed = consumer.committed([TopicPartition(topic, 0)], timeout=20)
        finally:
            consumer.close()
        return got, committed

    got, committed = await asyncio.to_thread(produce_and_consume)
    assert got == values
    assert committed[0].offset == len(values)  # through the coordinator the ring names
    # The leader (zone a) named the zone-b broker and served no records; that broker served them all.
    assert any(node == 1 and replica == 2 and size == 0 for node, size, replica in fetches)
    assert sum(size for node, size, _ in fetches if node == 2) > 0
    assert all(size == 0 for node, size, _ in fetches if node != 2)
