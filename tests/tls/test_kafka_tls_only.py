"""A standalone whose only Kafka listener is SSL (kafkaListeners without PLAINTEXT://): confluent-kafka
produces and consumes over it, and Metadata names that listener."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.standalone_process import Standalone

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture(scope="module")
def ssl_only(tmp_path_factory, pki):
    directory = tmp_path_factory.mktemp("kafka-ssl-only")
    server = Standalone(directory / "data")
    # The port the harness passes as --kafka-port and waits on: here the SSL listener's, which could not
    # bind it if a PLAINTEXT listener did.
    ssl_port = server.ports["kafka"]
    config = directory / "standalone.conf"
    config.write_text(f"tlsCertificateFilePath={pki.server_cert}\ntlsKeyFilePath={pki.server_key}\n"
                      f"kafkaListeners=SSL://127.0.0.1:{ssl_port}\n")
    server.extra_args = ["--compaction-interval", "0", "--config", str(config)]
    server.start()
    yield server
    assert server.stop() == 0, server.log.read_text()[-3000:]


def test_an_ssl_listener_without_plaintext(ssl_only, pki):
    conf = {"bootstrap.servers": ssl_only.bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    topic = f"ssl-only-{uuid.uuid4().hex[:6]}"
    producer = confluent_kafka.Producer({**conf, "message.timeout.ms": 15000})
    producer.produce(topic, b"over ssl only")
    assert producer.flush(20) == 0
    brokers = producer.list_topics(timeout=15).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", int(ssl_only.bootstrap.rsplit(":")[1]))]
    consumer = confluent_kafka.Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        message = None
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                break
        assert message is not None and message.value() == b"over ssl only"
    finally:
        consumer.close()


def test_no_kafka_listener_at_all_is_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "nereus.cli", "standalone", "--data-dir", str(tmp_path),
                           "--no-kafka-plaintext"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "needs another Kafka listener" in done.stderr, done.stderr
