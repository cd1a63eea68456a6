"""Replication from and to a cluster of three brokers (``nereus standalone --brokers 3``).

East runs three brokers, west one. A topic of six partitions spreads over east's brokers,
so each east broker runs the replicators of the partitions it owns, and west's replicators
send to several east brokers. Both clusters publish all along; when an east broker that
owns partitions dies (kill -9) or the topic is unloaded, the partitions' next owner
resumes from the replication cursor and the remote's deduplication: every message ends
up stored once in each cluster, in its source's order.

The namespace deduplicates every producer (not only replicators) in both clusters: a
client that resends what a killed broker stored without answering must not make a
duplicate at the source, which replication would then faithfully copy.
"""

from __future__ import annotations

import itertools
import json
import threading
import urllib.error
import urllib.request

import pulsar
import pytest

from tests.ports import free_port
from tests.replication.geo import Cluster, admin, introduce, replicate_namespace
from tests.waiting import wait_until

NAMESPACE = "spread/ns"
PARTITIONS = 6
KEYS = 60  # enough for every partition to get some
PROGRESS = 500  # messages each cluster publishes between two events of a test
CATCH_UP_SECONDS = 180.0
_topic_numbers = itertools.count()


@pytest.fixture(scope="module")
def spread(tmp_path_factory):
    root = tmp_path_factory.mktemp("geo-brokers")
    east, west = Cluster("east", root, brokers=3), Cluster("west", root)
    try:
        east.start()
        west.start()
        introduce([east, west])
        replicate_namespace([east, west], NAMESPACE)
        for cluster in (east, west):
            admin(cluster.node, "POST", f"/namespaces/{NAMESPACE}/deduplication", True)
        yield east, west
    finally:
        east.stop()
        west.stop()


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def owner(cluster: Cluster, partition: str) -> int:
    """The broker of ``cluster`` that owns ``partition`` (the lookup places it if nobody does)."""
    path = partition.replace("persistent://", "persistent/")
    return cluster.broker_of(get_json(f"{cluster.node.http}/lookup/v2/topic/{path}")["brokerUrl"])


def owners(cluster: Cluster, topic: str) -> dict[int, list[int]]:
    """Broker index -> the partitions of ``topic`` it owns now."""
    out: dict[int, list[int]] = {}
    for index in range(cluster.brokers):
        for name in get_json(f"{cluster.broker_http(index)}/admin/v2/nereus/owned-topics"):
            if name.startswith(f"{topic}-partition-"):
                out.setdefault(index, []).append(int(name.rsplit("-", 1)[1]))
    return out


def spread_topic(east: Cluster) -> str:
    """A new partitioned topic of east whose partitions several east brokers own, a child among them."""
    for _ in range(20):
        topic = f"persistent://{NAMESPACE}/spread-{next(_topic_numbers)}"
        admin(east.node, "PUT", f"/persistent/{NAMESPACE}/{topic.rsplit('/', 1)[1]}/partitions", PARTITIONS)
        placed = {owner(east, f"{topic}-partition-{i}") for i in range(PARTITIONS)}
        if len(placed) > 1 and placed != {0}:
            return topic
    raise AssertionError("no topic name spreads over east's brokers")


def partitions_in(cluster: Cluster, topic: str) -> int:
    """The partition count of ``topic`` in ``cluster`` (0: no partitioned topic there)."""
    try:
        return admin(cluster.node, "GET", f"/persistent/{topic.split('://', 1)[1]}/partitions")["partitions"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return 0
        raise


class Source:
    """One cluster's producer of a topic, publishing all along in a thread of its own: messages
    ``{cluster}-{n}``, keyed ``k{n % KEYS}``."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        self.name = cluster.name
        self.client = pulsar.Client(cluster.node.url, operation_timeout_seconds=120,
                                    logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        # No send timeout: a message for a partition whose broker died waits for the next owner.
        self.producer = self.client.create_producer(topic, batching_enabled=True, batching_max_messages=50,
                                                    block_if_queue_full=True, send_timeout_millis=0)
        self.acknowledged = 0  # every message below this number is acknowledged
        self._stopping = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._publish, name=f"publish in {self.name}", daemon=True)
        self._thread.start()

    def _publish(self) -> None:
        sent = 0
        try:
            while not self._stopping.is_set():
                for _ in range(50):
                    self.producer.send_async(f"{self.name}-{sent}".encode(), None, partition_key=f"k{sent % KEYS}")
                    sent += 1
                self.producer.flush()
                self.acknowledged = sent
                self._stopping.wait(0.02)  # a pace a busy machine keeps up with
        except BaseException as exc:  # raised in the test's thread by stop()
            self._failure = exc

    def progressed(self, count: int = PROGRESS) -> None:
        """Wait until ``count`` more messages are acknowledged."""
        target = self.acknowledged + count
        wait_until(lambda: self._failure is not None or self.acknowledged >= target,
                   f"{count} more messages published in {self.name}", timeout=120)
        assert self._failure is None, self._failure

    def stop(self) -> int:
        """Stop publishing; how many messages were published (every one acknowledged)."""
        self._stopping.set()
        self._thread.join(120)
        assert not self._thread.is_alive(), f"publishing in {self.name} did not stop"
        if self._failure is not None:
            raise self._failure
        return self.acknowledged

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(120)
        self.client.close()


def partition_stats(cluster: Cluster, topic: str) -> dict | None:
    """Each partition's stats, from its owner; None while a partition has no owner to answer."""
    path = topic.split("://", 1)[1]
    try:
        return get_json(f"{cluster.node.http}/admin/v2/persistent/{path}/partitioned-stats?perPartition=true")[
            "partitions"]
    except (urllib.error.URLError, OSError):
        return None


def caught_up(cluster: Cluster, topic: str, remote: str) -> bool:
    """Every partition's replicator to ``remote`` connected, with nothing left to send."""
    per = partition_stats(cluster, topic)
    return per is not None and len(per) == PARTITIONS and all(
        (r := s["replication"].get(remote)) is not None and r["connected"] and r["replicationBacklog"] == 0
        for s in per.values())


def check_stored(cluster: Cluster, topic: str, published: dict[str, int]) -> None:
    """``topic`` in ``cluster`` holds each source's messages once (``published``: how many each
    source cluster published), each partition's in the order published."""
    expected = {f"{source}-{n}".encode() for source, count in published.items() for n in range(count)}
    client = pulsar.Client(cluster.node.url, operation_timeout_seconds=120,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        audit = f"audit-{cluster.name}"
        consumer = client.subscribe(topic, audit, initial_position=pulsar.InitialPosition.Earliest)
        # A subscription made now has everything stored in its backlog: duplicates counted too.
        per = wait_until(lambda: (per := partition_stats(cluster, topic)) and all(
            audit in s["subscriptions"] for s in per.values()) and per,
            f"the new subscription on every partition in {cluster.name}")
        backlogs = {name: s["subscriptions"][audit]["msgBacklog"] for name, s in per.items()}
        assert all(backlogs.values()), backlogs  # every partition (and its replicators) had work
        stored = sum(backlogs.values())
        assert stored == len(expected), f"{cluster.name} stores {stored} messages, {len(expected)} were published"
        got = []
        while len(got) < len(expected):
            message = consumer.receive(timeout_millis=60_000)
            consumer.acknowledge(message)
            got.append((message.topic_name(), message.data()))
        with pytest.raises(pulsar.Timeout):
            consumer.receive(timeout_millis=1000)
    finally:
        client.close()
    data = [m for _, m in got]
    assert len(data) == len(set(data)) and set(data) == expected, cluster.name
    in_order: dict[tuple[str, str], list[int]] = {}  # (partition, source) -> numbers, as read
    for partition, message in got:
        source, number = message.decode().rsplit("-", 1)
        in_order.setdefault((partition, source), []).append(int(number))
    for where, numbers in in_order.items():
        assert numbers == sorted(numbers), (cluster.name, where)


def wait_caught_up(east: Cluster, west: Cluster, topic: str) -> None:
    wait_until(lambda: caught_up(east, topic, "west"), "east's replicators to west caught up",
               timeout=CATCH_UP_SECONDS, interval=0.5)
    wait_until(lambda: caught_up(west, topic, "east"), "west's replicators to east caught up",
               timeout=CATCH_UP_SECONDS, interval=0.5)


def publishing_in_both(east: Cluster, west: Cluster, topic: str, events) -> dict[str, int]:
    """Both clusters publish to ``topic`` while ``events()`` runs (each event after some progress);
    how many each published."""
    sources = [Source(east, topic)]
    try:
        # East's replicators make the partitioned topic in west, several east brokers at once;
        # west publishes once it is there (a producer would make a plain topic).
        wait_until(lambda: partitions_in(west, topic) == PARTITIONS, "the partitioned topic made in west")
        sources.append(Source(west, topic))
        for source in sources:
            source.progressed()
        events(sources)
        return {source.name: source.stop() for source in sources}
    finally:
        for source in sources:
            source.close()


def progressed(sources: list[Source]) -> None:
    for source in sources:
        source.progressed()


def test_kill_9_of_a_broker_owning_partitions_loses_nothing_and_stores_nothing_twice(spread):
    east, west = spread
    east.wait_all_brokers()
    topic = spread_topic(east)

    def kill_an_owner(sources: list[Source]) -> None:
        placed = owners(east, topic)
        assert len(placed) > 1, placed  # the partitions (and their replicators) on several east brokers
        victim = max((i for i in placed if i > 0), key=lambda i: len(placed[i]))
        process = east.child(victim)
        # Both directions are sending: east's replicators of the victim's partitions die with
        # it, and west's lose the east broker they send those partitions to.
        process.kill()
        process.wait(30)
        progressed(sources)  # the victim's partitions served again, by whichever broker took them
        wait_until(lambda: (child := east.child(victim)) and child.pid != process.pid,
                   "the killed broker started again", timeout=90)
        east.wait_all_brokers()
        progressed(sources)

    published = publishing_in_both(east, west, topic, kill_an_owner)
    wait_caught_up(east, west, topic)
    for cluster in (east, west):
        check_stored(cluster, topic, published)


def test_unloading_the_topic_in_either_cluster_loses_nothing_and_stores_nothing_twice(spread):
    east, west = spread
    east.wait_all_brokers()
    topic = spread_topic(east)
    local = topic.rsplit("/", 1)[1]

    def unload(sources: list[Source]) -> None:
        # Every partition on every east broker, then west's, while their replicators are busy.
        admin(east.node, "PUT", f"/persistent/{NAMESPACE}/{local}/unload")
        progressed(sources)
        admin(west.node, "PUT", f"/persistent/{NAMESPACE}/{local}/unload")
        progressed(sources)
        # Then one partition, at a broker that owns it, a child broker if one does (asked
        # directly: an admin call on a topic is answered by its owner, the others redirect).
        broker, parts = max(owners(east, topic).items(), key=lambda owned: owned[0] > 0)
        request = urllib.request.Request(
            f"{east.broker_http(broker)}/admin/v2/persistent/{NAMESPACE}/{local}-partition-{parts[0]}/unload",
            method="PUT")
        with urllib.request.urlopen(request, timeout=30):
            pass
        progressed(sources)

    published = publishing_in_both(east, west, topic, unload)
    wait_caught_up(east, west, topic)
    for cluster in (east, west):
        check_stored(cluster, topic, published)


def test_partitions_nobody_uses_resume_replication_on_their_next_owner_after_kill_9(spread):
    """No client brings the killed broker's partitions back: a broker that adopts them, or else each
    broker's sweep of lagging topics, loads them, and their replicators resume from the cursors."""
    east, west = spread
    east.wait_all_brokers()
    topic = spread_topic(east)
    path = topic.split("://", 1)[1]
    # West has the topic, and replicates nothing of it back: no replicator of west's brings
    # east's partitions back either.
    admin(west.node, "PUT", f"/persistent/{path}/partitions", PARTITIONS)
    admin(west.node, "POST", f"/persistent/{path}/replication", ["west"])
    reachable = admin(east.node, "GET", "/clusters/west")
    admin(east.node, "POST", "/clusters/west", {**reachable, "brokerServiceUrl": f"pulsar://127.0.0.1:{free_port()}"})
    client = pulsar.Client(east.node.url, operation_timeout_seconds=120,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic, batching_enabled=True, block_if_queue_full=True)
        for n in range(PROGRESS):
            producer.send_async(f"east-{n}".encode(), None, partition_key=f"k{n % KEYS}")
        producer.flush()
        # Every partition's replicator has made its cursor (and failed to reach west) before the kill.
        wait_until(lambda: (per := partition_stats(east, topic)) and all(
            (r := s["replication"].get("west")) and r["error"] and r["replicationBacklog"] for s in per.values()),
            "every partition's replicator behind, west out of reach")
        producer.close()  # no client of east's brings a partition back
        placed = owners(east, topic)
        victim = max((i for i in placed if i > 0), key=lambda i: len(placed[i]))
        process = east.child(victim)
        process.kill()
        process.wait(30)
        wait_until(lambda: (child := east.child(victim)) and child.pid != process.pid,
                   "the killed broker started again", timeout=90)
        east.wait_all_brokers()
    finally:
        client.close()
        admin(east.node, "POST", "/clusters/west", reachable)
    # From here on, no stats of east's partitions: asking for them would load them.
    wait_until(lambda: (per := partition_stats(west, topic)) and sum(
        s["msgInCounter"] for s in per.values()) >= PROGRESS, "east's messages in west", timeout=CATCH_UP_SECONDS,
        interval=0.5)
    check_stored(west, topic, {"east": PROGRESS})
