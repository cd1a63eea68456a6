"""Kafka SASL_PLAINTEXT end to end: a real standalone configured by file, official clients.

Users are made with ``nereus kafka-user set`` (the first user) and with
AlterUserScramCredentials; PLAIN checks the same SCRAM credentials, or a
``token:<jwt>`` password; OAUTHBEARER takes the JWTs of ``tokenSecretKey``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
import time
import uuid

import jwt
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from tests.kafka.raw import RawKafka
from tests.standalone_process import Standalone, free_port
from tests.tls.certs import make_pki

SECRET = os.urandom(32)
PASSWORD = "alice-secret"


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("ksasl")
    pki = make_pki(base / "pki")
    sasl_port, sasl_ssl_port = free_port(), free_port()
    config = base / "standalone.conf"
    config.write_text(
        f"kafkaListeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
        f"SASL_SSL://127.0.0.1:{sasl_ssl_port}\n"
        "saslAllowedMechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER\n"
        f"tokenSecretKey=data:;base64,{base64.b64encode(SECRET).decode()}\n"
        f"tlsCertificateFilePath={pki.server_cert}\ntlsKeyFilePath={pki.server_key}\n")
    server = Standalone(base / "data", ["--compaction-interval", "0", "--config", str(config)])
    server.start()
    server.sasl_bootstrap = f"127.0.0.1:{sasl_port}"
    server.sasl_ssl_bootstrap = f"127.0.0.1:{sasl_ssl_port}"
    server.ca = str(pki.ca)
    subprocess.run([sys.executable, "-m", "nereus.cli", "kafka-user", "set", "alice", "--password", PASSWORD,
                    "--metadata", f"oxia://127.0.0.1:{server.ports['oxia']}"], check=True, timeout=60)
    yield server
    assert server.stop() == 0, server.log.read_text()[-3000:]


def _token(subject: str, lifetime: float = 3600) -> tuple[str, float]:
    expiry = time.time() + lifetime
    return jwt.encode({"sub": subject, "exp": int(expiry)}, SECRET, algorithm="HS256"), expiry


def _conf(broker, mechanism: str, user: str = "alice", password: str = PASSWORD, *, ssl: bool = False) -> dict:
    conf = {"bootstrap.servers": broker.sasl_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism}
    if ssl:
        conf.update({"bootstrap.servers": broker.sasl_ssl_bootstrap, "security.protocol": "SASL_SSL",
                     "ssl.ca.location": broker.ca})
    if mechanism == "OAUTHBEARER":
        conf["oauth_cb"] = lambda _config: _token("alice")
    else:
        conf.update({"sasl.username": user, "sasl.password": password})
    return conf


def _round_trip(conf: dict) -> list[bytes]:
    topic = f"sasl-{uuid.uuid4().hex[:8]}"
    producer = Producer({**conf, "message.timeout.ms": 15000})
    for i in range(3):
        producer.produce(topic, f"m{i}".encode())
    assert producer.flush(20) == 0
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"])
def test_confluent_kafka_round_trip(sasl_broker, mechanism) -> None:
    assert _round_trip(_conf(sasl_broker, mechanism)) == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN", "OAUTHBEARER"])
def test_confluent_kafka_over_sasl_ssl(sasl_broker, mechanism) -> None:
    assert _round_trip(_conf(sasl_broker, mechanism, ssl=True)) == [b"m0", b"m1", b"m2"]


def test_plain_with_a_token_password(sasl_broker) -> None:
    conf = _conf(sasl_broker, "PLAIN", user="alice", password="token:" + _token("alice")[0])
    assert _round_trip(conf) == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("mechanism,ssl", [("SCRAM-SHA-512", False), ("SCRAM-SHA-256", False), ("PLAIN", False),
                                            ("SCRAM-SHA-512", True), ("PLAIN", True)])
def test_aiokafka_round_trip(sasl_broker, mechanism, ssl) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context

    topic = f"sasl-aio-{uuid.uuid4().hex[:8]}"
    auth = {"bootstrap_servers": sasl_broker.sasl_bootstrap, "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": "alice", "sasl_plain_password": PASSWORD}
    if ssl:
        auth.update(bootstrap_servers=sasl_broker.sasl_ssl_bootstrap, security_protocol="SASL_SSL",
                    ssl_context=create_ssl_context(cafile=sasl_broker.ca))

    async def run():
        producer = AIOKafkaProducer(**auth)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"hello")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **auth)
        await consumer.start()
        try:
            return (await asyncio.wait_for(consumer.getone(), 20)).value
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == b"hello"


def _refused(conf: dict) -> tuple[str, list]:
    """The error a producer gets; asserts nothing was delivered."""
    errors, delivered = [], []
    producer = Producer({**conf, "message.timeout.ms": 5000, "error_cb": errors.append})
    topic = f"sasl-refused-{uuid.uuid4().hex[:8]}"
    producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(10)
    assert delivered and delivered[0] is not None
    return topic, errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
def test_wrong_password_is_refused_and_nothing_written(sasl_broker, mechanism) -> None:
    topic, errors = _refused(_conf(sasl_broker, mechanism, password="wrong"))
    assert any(e.code() == KafkaError._AUTHENTICATION and "Authentication failed" in e.str() for e in errors), errors
    admin = AdminClient(_conf(sasl_broker, "SCRAM-SHA-512"))
    assert topic not in admin.list_topics(timeout=10).topics


def test_expired_token_is_refused(sasl_broker) -> None:
    conf = _conf(sasl_broker, "OAUTHBEARER")
    conf["oauth_cb"] = lambda _config: (_token("alice", lifetime=-60)[0], time.time() + 3600)
    _topic, errors = _refused(conf)
    assert any("invalid token" in e.str() for e in errors)


def test_scram_users_through_the_admin_api(sasl_broker) -> None:
    admin = AdminClient(_conf(sasl_broker, "SCRAM-SHA-512"))
    upsert = UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                          b"bob-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(10)
    described = admin.describe_user_scram_credentials(["bob"])["bob"].result(10)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 8192)]
    assert _round_trip(_conf(sasl_broker, "SCRAM-SHA-256", "bob", "bob-secret")) == [b"m0", b"m1", b"m2"]
    _topic, errors = _refused(_conf(sasl_broker, "SCRAM-SHA-512", "bob", "bob-secret"))  # only -256 was set
    assert errors

    deletion = UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256)
    for future in admin.alter_user_scram_credentials([deletion]).values():
        future.result(10)
    with pytest.raises(KafkaException):
        admin.describe_user_scram_credentials(["bob"])["bob"].result(10)
    assert _refused(_conf(sasl_broker, "SCRAM-SHA-256", "bob", "bob-secret"))[1]


def test_only_sasl_requests_before_authentication(sasl_broker) -> None:
    raw = RawKafka(sasl_broker.sasl_bootstrap)
    try:
        body = raw.request(18, 3, client_software_name="t", client_software_version="1")
        assert {k.api_key for k in body.api_keys} >= {17, 36, 50, 51}
        refused = raw.request(17, 1, mechanism="GSSAPI")
        assert refused.error_code == 33 and "SCRAM-SHA-512" in refused.mechanisms
        with pytest.raises((ConnectionError, OSError)):
            raw.metadata(None)
    finally:
        raw.close()


def test_plaintext_listener_is_unchanged(sasl_broker) -> None:
    raw = RawKafka(sasl_broker.bootstrap)
    try:
        assert raw.request(17, 1, mechanism="PLAIN").error_code == 34  # ILLEGAL_SASL_STATE: no SASL here
        brokers = raw.metadata(None).brokers
        assert [b.port for b in brokers] == [int(sasl_broker.bootstrap.rsplit(":", 1)[1])]
    finally:
        raw.close()
