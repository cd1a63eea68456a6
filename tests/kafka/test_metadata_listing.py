"""A Metadata request for every topic lists the namespace's topics as Kafka sees them, Pulsar's too."""

from __future__ import annotations

import urllib.request

from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from tests.waiting import wait_until

TIMEOUT = 20


def put(broker, path: str, body: bytes = b"", method: str = "PUT") -> None:
    request = urllib.request.Request(f"{broker.http}/admin/v2/persistent/public/default/{path}", data=body,
                                     method=method, headers={"Content-Type": "application/json"})
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


def test_the_kept_listing_follows_changes_made_around_kafka(broker, topic):
    """The listing is kept between requests and patched by each change heard: Pulsar's admin API's
    creations, growth and deletions show in the next answers, as do Kafka's own."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def mine() -> dict[str, int]:
        listed = admin.list_topics(timeout=TIMEOUT).topics
        return {name: len(t.partitions) for name, t in listed.items() if name.startswith(topic)}

    kafka_made = f"{topic}-kafka"
    admin.create_topics([NewTopic(kafka_made, 1)])[kafka_made].result(TIMEOUT)
    assert mine() == {kafka_made: 1}
    assert mine() == {kafka_made: 1}  # kept
    plain, partitioned = f"{topic}-plain", f"{topic}-parted"
    put(broker, plain)
    put(broker, f"{partitioned}/partitions", b"2")
    wait_until(lambda: mine() == {kafka_made: 1, plain: 1, partitioned: 2}, "the new topics listed")
    put(broker, f"{partitioned}/partitions", b"5", method="POST")
    wait_until(lambda: mine().get(partitioned) == 5, "the grown topic listed with 5 partitions")
    put(broker, plain, method="DELETE")
    wait_until(lambda: plain not in mine(), "the deleted topic gone")
    admin.create_partitions([NewPartitions(kafka_made, 3)])[kafka_made].result(TIMEOUT)
    assert mine() == {kafka_made: 3, partitioned: 5}  # a change made here shows at once
    admin.delete_topics([kafka_made])[kafka_made].result(TIMEOUT)
    assert mine() == {partitioned: 5}
