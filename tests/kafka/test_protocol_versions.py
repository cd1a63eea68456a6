"""Newer request versions, spoken as Kafka 4 brokers speak them (a raw client over a socket):
Metadata v13's top-level error code, ListOffsets v8-v10's earliest-local and latest-tiered
specs, DescribeGroups v6's GROUP_ID_NOT_FOUND, FindCoordinator v5 and ApiVersions v4."""

from __future__ import annotations

import datetime
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from nereus.codec.kafka import make, nested
from nereus.codec.kafka.records import Record, build_batch

from .conftest import wait_until
from .raw import RawKafka

EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED = -2, -1, -4, -5


def _produce(broker, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(20) == 0


def _list_offsets(raw: RawKafka, topic: str, timestamps: list[int], version: int = 10) -> list:
    cls = load_request_schema(2, version)
    parts = tuple(make(nested(cls, "ListOffsetsPartition"), partition_index=0, current_leader_epoch=-1, timestamp=ts)
                  for ts in timestamps)
    answer = raw.request(2, version, replica_id=-1, isolation_level=0, timeout=datetime.timedelta(seconds=5),
                         topics=(make(nested(cls, "ListOffsetsTopic"), name=topic, partitions=parts),))
    return list(answer.topics[0].partitions)


def test_api_versions_v4_offers_the_newer_versions(broker, raw):
    answer = raw.request(18, 4, client_software_name="raw", client_software_version="1")
    assert answer.error_code == ErrorCode.none
    offered = {k.api_key: k.max_version for k in answer.api_keys}
    assert (offered[2], offered[3], offered[10], offered[15], offered[18]) == (10, 13, 5, 6, 4)


def test_metadata_v13_and_list_offsets_earliest_local_and_latest_tiered(broker, topic, raw):
    _produce(broker, topic, 3)
    meta = raw.metadata([topic], version=13)
    assert meta.error_code == ErrorCode.none and meta.topics[0].error_code == ErrorCode.none
    earliest, latest, local, tiered = _list_offsets(raw, topic, [EARLIEST, LATEST, EARLIEST_LOCAL, LATEST_TIERED])
    assert [p.error_code for p in (earliest, latest, local, tiered)] == [ErrorCode.none] * 4
    assert (earliest.offset, latest.offset) == (0, 3)
    assert local.offset == earliest.offset  # every record is in the object store, none was tiered away
    assert (tiered.offset, tiered.timestamp) == (-1, -1)  # nothing moved to a remote tier


def test_describe_groups_v6_tells_an_unknown_group_from_one_with_only_offsets(broker, topic, group, raw):
    _produce(broker, topic, 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)  # no membership, offsets only
    finally:
        consumer.close()
    (coordinator,) = raw.request(10, 5, key_type=0, coordinator_keys=(group,)).coordinators
    assert coordinator.error_code == ErrorCode.none and coordinator.node_id >= 0
    (unknown,) = raw.request(15, 6, groups=(f"{group}-none",), include_authorized_operations=False).groups
    assert unknown.error_code == ErrorCode.group_id_not_found and group in unknown.error_message
    (older,) = raw.request(15, 5, groups=(f"{group}-none",), include_authorized_operations=False).groups
    assert (older.error_code, older.group_state) == (ErrorCode.none, "Dead")
    (offsets_only,) = raw.request(15, 6, groups=(group,), include_authorized_operations=False).groups
    assert (offsets_only.error_code, offsets_only.group_state, offsets_only.members) == (ErrorCode.none, "Empty", ())


def test_produce_v13_names_topics_by_id(broker, topic, raw):
    _produce(broker, topic, 1)
    topic_id = raw.metadata([topic], version=12).topics[0].topic_id
    unknown = uuid.UUID(int=12345)
    cls = load_request_schema(0, 13)
    tcls, pcls = nested(cls, "TopicProduceData"), nested(cls, "PartitionProduceData")
    data = (tcls(topic_id=topic_id, partition_data=(pcls(index=0, records=build_batch([Record(0, 0, None, b"x")])),)),
            tcls(topic_id=unknown, partition_data=(pcls(index=0, records=build_batch([Record(0, 0, None, b"y")])),)))
    answer = raw.request(0, 13, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=10),
                         topic_data=data)
    by_id = {t.topic_id: t.partition_responses[0] for t in answer.responses}
    assert (by_id[topic_id].error_code, by_id[topic_id].base_offset) == (ErrorCode.none, 1)
    assert by_id[unknown].error_code == ErrorCode.unknown_topic_id
    assert raw.fetch(topic, 0, 1).records  # the record is there, under its name
    v12 = raw.produce(topic, 0, build_batch([Record(0, 0, None, b"z")]), version=12)
    assert (v12.error_code, v12.base_offset) == (ErrorCode.none, 2)


def _fetch_by_id(raw: RawKafka, *topic_ids, version: int = 16) -> dict:
    """Partition 0 of each topic named by id, from offset 0: the answer's partition data by topic id."""
    cls = load_request_schema(1, version)
    part = make(nested(cls, "FetchPartition"), partition=0, current_leader_epoch=-1, fetch_offset=0,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
    answer = raw.request(1, version, cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1,
                         max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                         topics=tuple(make(nested(cls, "FetchTopic"), topic_id=tid, partitions=(part,))
                                      for tid in topic_ids),
                         forgotten_topics_data=(), rack_id="")
    return {t.topic_id: t.partitions[0] for t in answer.responses}


def test_fetch_v13_to_v17_name_topics_by_id(broker, topic, raw):
    _produce(broker, topic, 2)
    topic_id = raw.metadata([topic], version=12).topics[0].topic_id
    unknown = uuid.UUID(int=54321)
    for version in (13, 15, 17):
        by_id = _fetch_by_id(raw, topic_id, unknown, version=version)
        found = by_id[topic_id]
        assert (found.error_code, found.high_watermark) == (ErrorCode.none, 2) and found.records, version
        assert by_id[unknown].error_code == ErrorCode.unknown_topic_id, version


def test_a_topic_created_again_is_not_read_under_its_old_id(broker, topic, raw):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _produce(broker, topic, 2)
    old = raw.metadata([topic], version=12).topics[0].topic_id
    assert _fetch_by_id(raw, old)[old].high_watermark == 2
    admin.delete_topics([topic])[topic].result(20)
    wait_until(lambda: topic not in admin.list_topics(timeout=10).topics)
    admin.create_topics([NewTopic(topic, 1)])[topic].result(20)
    new = raw.metadata([topic], version=12).topics[0].topic_id
    assert new != old
    wait_until(lambda: _fetch_by_id(raw, old)[old].error_code == ErrorCode.unknown_topic_id)
    answer = _fetch_by_id(raw, new)[new]
    assert (answer.error_code, answer.high_watermark) == (ErrorCode.none, 0)
