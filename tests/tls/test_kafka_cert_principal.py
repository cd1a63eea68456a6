"""On a Kafka SSL listener verifying client certificates, the certificate's CN is the Kafka principal
(the role Pulsar's TLS provider gives): Kafka ACLs allow and deny by it."""

from __future__ import annotations

import confluent_kafka
import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from tests.standalone_process import free_port

from .certs import issue_client
from .conftest import _start

TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"


@pytest.fixture(scope="module")
def acl_standalone(tmp_path_factory, pki):
    directory = tmp_path_factory.mktemp("cert-principal")
    port = free_port()
    server = _start(directory, f"""
tlsCertificateFilePath={pki.server_cert}
tlsKeyFilePath={pki.server_key}
tlsTrustCertsFilePath={pki.ca}
tlsRequireTrustedClientCertOnConnect=true
kafkaListeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:{port}
authenticationEnabled=true
authenticationProviders={TLS_PROVIDER}
authorizationEnabled=true
superUserRoles=kafka-admin
""")
    server.kafka_ssl = port
    server.certs = {cn: issue_client(directory, pki.ca, cn) for cn in ("kafka-admin", "writer", "stranger")}
    yield server
    assert server.stop() == 0, server.log.read_text()[-3000:]


def _config(server, pki, cn: str) -> dict:
    cert, key = server.certs[cn]
    return {"bootstrap.servers": f"localhost:{server.kafka_ssl}", "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca), "ssl.certificate.location": str(cert), "ssl.key.location": str(key),
            "socket.timeout.ms": 5000, "message.timeout.ms": 8000, "log_level": 0}


def _produce(config: dict, topic: str):
    """The delivery error of one message (None: delivered)."""
    outcome = []
    producer = confluent_kafka.Producer(config)
    producer.produce(topic, b"by certificate", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert outcome, "no delivery report"
    return outcome[0]


def _wait(futures: dict) -> None:
    for future in futures.values():
        future.result(timeout=20)


def test_acls_allow_and_deny_by_certificate_cn(acl_standalone, pki):
    topic = "cert-orders"
    admin = AdminClient(_config(acl_standalone, pki, "kafka-admin"))  # a superuser by its certificate
    _wait(admin.create_topics([NewTopic(topic, 1)]))
    _wait(admin.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:writer", "*",
                                        AclOperation.WRITE, AclPermissionType.ALLOW)]))
    assert _produce(_config(acl_standalone, pki, "writer"), topic) is None
    refused = _produce(_config(acl_standalone, pki, "stranger"), topic)
    assert refused is not None and refused.code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    # The CN is the principal of cluster operations too: only the superuser's certificate manages ACLs.
    stranger = AdminClient(_config(acl_standalone, pki, "stranger"))  # kept: a destroyed client fails its futures
    with pytest.raises(confluent_kafka.KafkaException) as error:
        _wait(stranger.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                               "User:stranger", "*", AclOperation.WRITE, AclPermissionType.ALLOW)]))
    assert error.value.args[0].code() == confluent_kafka.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert _produce(_config(acl_standalone, pki, "stranger"), topic).code() \
        == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
