"""A Metadata request for every topic lists the namespace's topics as Kafka sees them, Pulsar's too."""

from __future__ import annotations

import urllib.request

from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT = 20


def put(broker, path: str, body: bytes = b"") -> None:
    request = urllib.request.Request(f"{broker.http}/admin/v2/persistent/public/default/{path}", data=body,
                                     method="PUT", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=TIMEOUT):
        pass


def test_every_topic_is_listed_once_with_its_partitions(broker, topic):
    plain, partitioned, kafka_made = f"{topic}-plain", f"{topic}-parted", f"{topic}-kafka"
    put(broker, plain)  # a non-partitioned Pulsar topic: one Kafka partition
    put(broker, f"{partitioned}/partitions", b"3")  # its partitions' streams are not topics of their own
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(kafka_made, 2)])[kafka_made].result(TIMEOUT)

    listed = admin.list_topics(timeout=TIMEOUT).topics  # topics null: every topic
    mine = {name: len(t.partitions) for name, t in listed.items() if name.startswith(topic)}
    assert mine == {plain: 1, partitioned: 3, kafka_made: 2}
    for name in mine:
        assert listed[name].error is None
        assert all(p.leader >= 0 for p in listed[name].partitions.values())
