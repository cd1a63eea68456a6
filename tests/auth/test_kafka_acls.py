"""Kafka ACLs on a real standalone with authorization: confluent-kafka over SASL_PLAINTEXT (PLAIN with a
``token:<jwt>`` password), ACLs managed with the AdminClient, enforced on Produce, Fetch, groups, Metadata."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourcePatternType, ResourceType)

from nereus.auth.tokens import create_token
from tests.standalone_process import Standalone, free_port

TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("kacl")
    subprocess.run([sys.executable, "-m", "nereus.cli", "tokens", "create-secret-key", "--output",
                    str(root / "secret.key")], check=True, capture_output=True, timeout=60)
    sasl_port = free_port()
    config = root / "standalone.conf"
    config.write_text(f"authenticationEnabled=true\nauthenticationProviders={TOKEN_PROVIDER}\n"
                      f"tokenSecretKey=file://{root / 'secret.key'}\n"
                      "authorizationEnabled=true\nsuperUserRoles=admin\n"
                      f"kafkaListeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:{sasl_port}\n"
                      "saslAllowedMechanisms=PLAIN\n")
    node = Standalone(root / "data", ["--compaction-interval", "0", "--config", str(config)])
    node.start()
    node.secret = (root / "secret.key").read_bytes()
    node.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    yield node
    node.stop()


def _conf(node, role: str) -> dict:
    return {"bootstrap.servers": node.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": role,
            "sasl.password": "token:" + create_token(role, secret_key=node.secret)}


def _admin(node, role: str = "admin") -> AdminClient:
    return AdminClient(_conf(node, role))


def _acl(topic: str, principal: str, operation, resource=ResourceType.TOPIC,
         pattern=ResourcePatternType.LITERAL) -> AclBinding:
    return AclBinding(resource, topic, pattern, principal, "*", operation, AclPermissionType.ALLOW)


def _wait(futures: dict) -> None:
    for future in futures.values():
        future.result(timeout=30)


def _produce(node, role: str, topic: str, value: bytes) -> KafkaError | None:
    """The delivery error of one record (None: written). A refusal the producer already knows from
    its first metadata answer (which may come before the record is handed over) is raised by
    ``produce`` itself: the same error."""
    outcome = []
    producer = Producer({**_conf(node, role), "message.timeout.ms": 10000})
    try:
        producer.produce(topic, value, on_delivery=lambda err, _msg: outcome.append(err))
    except KafkaException as exc:
        return exc.args[0]
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def _consume(node, role: str, topic: str, group: str, count: int) -> tuple[list[bytes], KafkaError | None]:
    """(values read, the first error the consumer reported)."""
    consumer = Consumer({**_conf(node, role), "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, error, deadline = [], None, time.monotonic() + 20
    try:
        while len(got) < count and error is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                error = msg.error()
            else:
                got.append(msg.value())
    finally:
        consumer.close()
    return got, error


def _stored(node, topic: str) -> int:
    """Messages written to the Kafka topic (its one partition), from the admin API as the superuser."""
    request = urllib.request.Request(
        f"{node.http}/admin/v2/persistent/public/default/{topic}/partitioned-stats",
        headers={"Authorization": "Bearer " + create_token("admin", secret_key=node.secret)})
    with urllib.request.urlopen(request, timeout=15) as response:
        return json.loads(response.read())["msgInCounter"]


def test_acls_allow_and_deny_produce_and_consume(broker):
    topic, group = f"orders-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    admin = _admin(broker)
    _wait(admin.create_topics([NewTopic(topic, 1)]))
    _wait(admin.create_acls([_acl(topic, "User:writer", AclOperation.WRITE)]))

    assert _produce(broker, "writer", topic, b"ok") is None
    refused = _produce(broker, "stranger", topic, b"no")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _stored(broker, topic) == 1  # the refused record was not written

    got, error = _consume(broker, "writer", topic, group, 1)
    assert not got and error is not None and error.code() in (KafkaError.GROUP_AUTHORIZATION_FAILED,
                                                              KafkaError.TOPIC_AUTHORIZATION_FAILED)
    _wait(admin.create_acls([_acl(topic, "User:writer", AclOperation.READ),
                             _acl("g-", "User:writer", AclOperation.READ, ResourceType.GROUP,
                                  ResourcePatternType.PREFIXED)]))
    got, error = _consume(broker, "writer", topic, group, 1)
    assert got == [b"ok"], error

    described = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                                     "User:writer", None, AclOperation.ANY,
                                                     AclPermissionType.ANY)).result(timeout=30)
    assert {(b.restype, b.name, b.operation) for b in described} == {
        (ResourceType.TOPIC, topic, AclOperation.WRITE), (ResourceType.TOPIC, topic, AclOperation.READ),
        (ResourceType.GROUP, "g-", AclOperation.READ)}

    # Deleting the WRITE binding refuses the next produce.
    deleted = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                                  "User:writer", None, AclOperation.WRITE,
                                                  AclPermissionType.ALLOW)])
    assert len(list(deleted.values())[0].result(timeout=30)) == 1
    refused = _produce(broker, "writer", topic, b"late")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _stored(broker, topic) == 1


def test_metadata_hides_topics_and_only_cluster_admins_manage_acls(broker):
    visible, hidden = f"seen-{uuid.uuid4().hex[:6]}", f"hidden-{uuid.uuid4().hex[:6]}"
    admin = _admin(broker)
    _wait(admin.create_topics([NewTopic(visible, 1), NewTopic(hidden, 1)]))
    _wait(admin.create_acls([_acl(visible, "User:viewer", AclOperation.DESCRIBE)]))
    viewer = _admin(broker, "viewer")  # kept: a destroyed client fails its pending futures
    listed = viewer.list_topics(timeout=20).topics
    assert visible in listed and hidden not in listed
    named = viewer.list_topics(hidden, timeout=20).topics[hidden]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    with pytest.raises(KafkaException) as refused:
        _wait(viewer.create_acls([_acl(hidden, "User:viewer", AclOperation.ALL)]))
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException) as refused:
        _wait(viewer.create_topics([NewTopic(f"new-{uuid.uuid4().hex[:6]}", 1)]))
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    change = ConfigResource(ConfigResource.Type.TOPIC, visible, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as refused:
        _wait(viewer.incremental_alter_configs([change]))
    assert refused.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_pulsar_grants_apply_to_kafka_and_kafka_acls_to_pulsar(broker):
    import pulsar

    topic = f"shared-{uuid.uuid4().hex[:6]}"
    token = create_token("admin", secret_key=broker.secret)
    request = urllib.request.Request(f"{broker.http}/admin/v2/namespaces/public/default/permissions/both",
                                     data=b'["produce", "consume"]', method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=15).close()
    admin = _admin(broker)
    _wait(admin.create_topics([NewTopic(topic, 1)]))
    assert _produce(broker, "both", topic, b"via-grant") is None
    got, error = _consume(broker, "both", topic, f"g-{topic}", 1)
    assert got == [b"via-grant"], error

    _wait(admin.create_acls([_acl(topic, "User:kafka-writer", AclOperation.WRITE)]))
    client = pulsar.Client(broker.url, authentication=pulsar.AuthenticationToken(
        create_token("kafka-writer", secret_key=broker.secret)), operation_timeout_seconds=10)
    try:
        client.create_producer(f"persistent://public/default/{topic}").send(b"via-acl")
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(f"persistent://public/default/{topic}", "s")
    finally:
        client.close()
