"""Tenants and namespaces enforced, topic auto-creation settings, producer access modes (official client)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.pulsar_admin.conftest import Admin
from tests.standalone_process import Standalone


def _ns(admin: Admin, **policies) -> str:
    ns = f"public/ns-{uuid.uuid4().hex[:8]}"
    admin.ok("PUT", f"/namespaces/{ns}", policies or None)
    return ns


# -- tenants and namespaces -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["persistent://no-such-tenant/default/t", "persistent://public/no-such-ns/t"])
def test_a_missing_tenant_or_namespace_is_topic_not_found(client, pulsar, name):
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(name)
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(name, "s")
    with pytest.raises(pulsar.TopicNotFound):
        client.create_reader(name, pulsar.MessageId.earliest)


def test_public_default_exists_and_auto_creates(client, standalone):
    admin = Admin(standalone.http)
    assert "default" in [n.split("/")[-1] for n in admin.ok("GET", "/namespaces/public")]
    producer = client.create_producer(f"t-{uuid.uuid4().hex[:8]}")  # short name: public/default
    producer.send(b"x")


def test_a_namespace_policy_turns_auto_creation_off_and_back(client, standalone, pulsar):
    admin = Admin(standalone.http)
    ns = _ns(admin)
    admin.ok("POST", f"/namespaces/{ns}/autoTopicCreation", {"allowAutoTopicCreation": False})
    assert admin.ok("GET", f"/namespaces/{ns}/autoTopicCreation") == {
        "allowAutoTopicCreation": False, "topicType": "non-partitioned"}
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://{ns}/missing")
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(f"persistent://{ns}/missing", "s")
    admin.ok("PUT", f"/persistent/{ns}/made")  # an existing topic is usable whatever the policy
    client.create_producer(f"persistent://{ns}/made").send(b"ok")
    admin.ok("DELETE", f"/namespaces/{ns}/autoTopicCreation")
    client.create_producer(f"persistent://{ns}/missing").send(b"now created")


def test_bad_auto_creation_policies_are_refused(standalone):
    admin = Admin(standalone.http)
    ns = _ns(admin)
    for bad in ({}, {"allowAutoTopicCreation": "yes"},
                {"allowAutoTopicCreation": True, "topicType": "sometimes"},
                {"allowAutoTopicCreation": True, "topicType": "partitioned"},
                {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 0}):
        status, _ = admin.post(f"/namespaces/{ns}/autoTopicCreation", bad)
        assert status == 400, bad


def test_partitioned_auto_creation_by_namespace_policy(client, standalone):
    admin = Admin(standalone.http)
    ns = _ns(admin)
    admin.ok("POST", f"/namespaces/{ns}/autoTopicCreation",
             {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3})
    topic = f"persistent://{ns}/auto"
    producer = client.create_producer(topic)
    for i in range(6):
        producer.send(b"m%d" % i)
    assert admin.ok("GET", f"/persistent/{ns}/auto/partitions")["partitions"] == 3
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(3)]


@pytest.fixture(scope="module")
def no_auto_creation(tmp_path_factory):
    """A standalone with allowAutoTopicCreation=false."""
    server = Standalone(tmp_path_factory.mktemp("noauto") / "data",
                        ["--compaction-interval", "0", "--no-auto-topic-creation",
                         "--auto-topic-creation-type", "partitioned", "--default-partitions", "2"])
    server.start()
    yield server
    assert server.stop() == 0, server.log.read_text()[-3000:]


def test_broker_auto_creation_off(no_auto_creation, make_client, pulsar):
    client = make_client(no_auto_creation.url)
    admin = Admin(no_auto_creation.http)
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"t-{uuid.uuid4().hex[:8]}")
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(f"t-{uuid.uuid4().hex[:8]}", "s")
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin.ok("PUT", f"/persistent/public/default/{name}")
    client.create_producer(name).send(b"exists")
    # A namespace may allow what the broker does not.
    ns = _ns(admin)
    admin.ok("POST", f"/namespaces/{ns}/autoTopicCreation", {"allowAutoTopicCreation": True,
                                                              "topicType": "partitioned", "defaultNumPartitions": 4})
    topic = f"persistent://{ns}/allowed"
    client.create_producer(topic).send(b"x")
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-{i}" for i in range(4)]


# -- producer access modes ------------------------------------------------------------------------------

def test_exclusive_refuses_others_as_pulsar_does(client, topic, pulsar):
    shared = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):  # shared producers exist
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    shared.close()
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    first.send(b"still mine")
    first.close()
    client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive).send(b"next")


def test_exclusive_with_fencing_takes_over_and_the_old_producer_fails(make_client, standalone, topic, pulsar):
    old_client, new_client = make_client(standalone.url), make_client(standalone.url)
    old = old_client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive,
                                     batching_enabled=False, send_timeout_millis=5000)
    old.send(b"before")
    new = new_client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.ExclusiveWithFencing,
                                     batching_enabled=False)
    new.send(b"after")
    deadline = time.monotonic() + 20
    while True:  # its reconnect is refused: the producer is fenced for good
        try:
            old.send(b"fenced?")
        except pulsar.ProducerFenced:
            break
        assert time.monotonic() < deadline, "the fenced producer can still send"
    reader = new_client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(timeout_millis=10000).data() for _ in range(2)]
    assert got == [b"before", b"after"]
    assert not reader.has_message_available()


def test_wait_for_exclusive_waits_until_the_holder_leaves(make_client, standalone, topic, pulsar):
    holder = make_client(standalone.url).create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    created = []

    def wait() -> None:
        client = make_client(standalone.url, operation_timeout_seconds=30)
        created.append(client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.WaitForExclusive))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    waiter.join(1.5)  # a head start only: it must still be waiting whatever the machine's speed
    assert not created and waiter.is_alive()
    holder.send(b"holder")
    holder.close()
    waiter.join(30)
    assert created, "the waiting producer did not get the topic"
    created[0].send(b"waiter")


def test_the_topic_epoch_outlives_an_unload(client, standalone, topic, pulsar):
    """A producer fenced before the topic moved must not win after it: the epoch is stored with the stream."""
    admin = Admin(standalone.http)
    path = "/persistent/" + topic[len("persistent://"):]
    first = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    first.send(b"1")
    first.close()
    assert admin.ok("GET", path + "/stats")["topicEpoch"] == 1
    admin.ok("PUT", path + "/unload")
    second = client.create_producer(topic, access_mode=pulsar.ProducerAccessMode.Exclusive)
    second.send(b"2")
    assert admin.ok("GET", path + "/stats")["topicEpoch"] == 2
