"""`nereus standalone --config FILE` end to end: a real process configured by a Pulsar-style file."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pulsar
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource
import pytest

from .processes import Server, assert_one_line_failure
from tests.ports import free_port
from tests.standalone_process import Standalone


def _write_config(path: Path, data_dir: Path, ports: dict) -> None:
    path.write_text(f"""# a Pulsar operator's file, with keys Nereus ignores
clusterName=conf-cluster
brokerServicePort={ports['pulsar']}
webServicePort={ports['http_in_file']}
kafkaListeners=PLAINTEXT://127.0.0.1:{ports['kafka']}
oxiaPort = {ports['oxia']}
dataDir={data_dir}
compactionIntervalSeconds=0
brokerDeduplicationEnabled=false
maxMessageSize=65536
defaultNumPartitions=3
zookeeperServers=localhost:2181
managedLedgerCacheSizeMB=64
bookkeeperClientTimeoutInSeconds=30
someUnknownSetting=1
webServicePot=1
""")


def test_a_standalone_takes_its_settings_from_the_file_and_flags_override_it(tmp_path: Path):
    ports = {"pulsar": free_port(), "http_in_file": free_port(), "http": free_port(), "kafka": free_port(),
             "oxia": free_port()}
    config = tmp_path / "standalone.conf"
    _write_config(config, tmp_path / "data", ports)
    server = Server(["standalone", "--config", str(config), "--http-port", str(ports["http"])], tmp_path / "log")
    try:
        for name in ("pulsar", "kafka", "oxia", "http"):
            server.wait_port(ports[name])
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['http']}/admin/v2/clusters", timeout=10) as response:
            assert json.loads(response.read()) == ["conf-cluster"]
        client = pulsar.Client(f"pulsar://127.0.0.1:{ports['pulsar']}")
        try:
            topic = "persistent://public/default/configured"
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(topic)
            for i in range(3):
                producer.send(b"m%d" % i)
            got = [consumer.receive(timeout_millis=30000).data() for _ in range(3)]
            assert got == [b"m0", b"m1", b"m2"]
            # brokerDeduplicationEnabled=false: a repeated sequence id is stored again.
            named = client.create_producer(topic, producer_name="resender", batching_enabled=False)
            named.send(b"first", sequence_id=7)
            named.send(b"again", sequence_id=7)
            assert [consumer.receive(timeout_millis=30000).data() for _ in range(2)] == [b"first", b"again"]
            # maxMessageSize=65536: the broker tells the client, which refuses a larger message.
            with pytest.raises(pulsar.MessageTooBig):
                producer.send(b"x" * 100_000)
        finally:
            client.close()
        _kafka_uses_the_configured_listener_and_partitions(ports["kafka"])
        assert (tmp_path / "data" / "meta").is_dir()  # dataDir came from the file
        assert server.proc.poll() is None
    finally:
        code = server.stop()
    log = server.text()
    assert code == 0, log[-3000:]
    # The flag won: nothing listened on the file's HTTP port.
    assert f"http=127.0.0.1:{ports['http']}" in log
    ignored = [line for line in log.splitlines() if "ignored" in line]
    assert len(ignored) == 2, ignored  # once each: the keys without use, the likely misspelling
    for key in ("zookeeperServers", "managedLedgerCacheSizeMB", "bookkeeperClientTimeoutInSeconds",
                "someUnknownSetting"):
        assert key in ignored[0]
    assert "webServicePot (did you mean webServicePort?)" in ignored[1]
    assert "Traceback" not in log


def _kafka_uses_the_configured_listener_and_partitions(port: int) -> None:
    bootstrap = f"127.0.0.1:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (broker_configs,) = admin.describe_configs([ConfigResource(ConfigResource.Type.BROKER, "0")]).values()
    configs = broker_configs.result(timeout=30)
    assert configs["num.partitions"].value == "3"
    assert configs["message.max.bytes"].value == "65536"  # maxMessageSize: what Kafka clients are told too
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("auto-created", b"v")
    assert producer.flush(30) == 0
    assert len(admin.list_topics("auto-created", timeout=30).topics["auto-created"].partitions) == 3


def test_an_invalid_value_stops_start_up_with_one_line_naming_the_key_and_value(tmp_path: Path):
    config = tmp_path / "bad.conf"
    config.write_text(f"dataDir={tmp_path / 'data'}\nbrokerServicePort=66x50\n")
    assert_one_line_failure(["standalone", "--config", str(config)], "brokerServicePort", "'66x50'")
    config.write_text(f"dataDir={tmp_path / 'data'}\nwebServicePort=70000\n")  # converts, but out of range
    assert_one_line_failure(["standalone", "--config", str(config)], "webServicePort", "'70000'")
    assert not (tmp_path / "data").exists()  # nothing started


def test_a_missing_config_file_is_one_line(tmp_path: Path):
    assert_one_line_failure(["standalone", "--config", str(tmp_path / "nope.conf")], "nope.conf")


def test_a_broker_reads_its_metadata_and_object_store_from_the_file(tmp_path: Path):
    config = tmp_path / "broker.conf"
    config.write_text(f"metadataStoreUrl=oxia://127.0.0.1:{free_port()}\nobjectStoreUrl={(tmp_path / 'o').as_uri()}\n"
                      "metadataStoreOperationTimeoutSeconds=1\nwebServicePort=0\nbrokerServicePort=0\n"
                      "kafkaListeners=PLAINTEXT://127.0.0.1:0\n")
    assert_one_line_failure(["broker", "--config", str(config)], "cannot use the metadata service",
                            "gave up after 1 s")


def _rest(node: Standalone, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{node.http}/admin/v2{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=15) as response:
        text = response.read()
    return json.loads(text) if text else None


def test_default_retention_applies_to_namespaces_without_a_policy(tmp_path: Path):
    config = tmp_path / "standalone.conf"
    config.write_text("defaultRetentionTimeInMinutes=0\ndefaultRetentionSizeInMB=0\n")  # Pulsar's defaults
    node = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--config", str(config)])
    node.start()
    try:
        _rest(node, "PUT", "/namespaces/public/kept")
        _rest(node, "POST", "/namespaces/public/kept/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
        client = pulsar.Client(node.url)
        try:
            for topic in ("public/default/dropped", "public/kept/stays"):  # no subscriptions: all acknowledged
                producer = client.create_producer(f"persistent://{topic}", batching_enabled=False)
                for i in range(5):
                    producer.send(b"m%d" % i)
        finally:
            client.close()
        assert _rest(node, "GET", "/persistent/public/default/dropped/retention?applied=true") == {
            "retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
        for topic in ("public/default/dropped", "public/kept/stays"):
            _rest(node, "POST", f"/persistent/{topic}/trim")
        assert _rest(node, "GET", "/persistent/public/default/dropped/internalStats")["startOffset"] == 5
        assert _rest(node, "GET", "/persistent/public/kept/stays/internalStats")["startOffset"] == 0
        runtime = _rest(node, "GET", "/brokers/configuration/runtime")
        assert runtime["defaultRetentionTimeInMinutes"] == "0" and runtime["defaultRetentionSizeInMB"] == "0"
    finally:
        assert node.stop() == 0
