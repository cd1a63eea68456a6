"""The configuration file's parser and key table (no I/O but reading the shipped example)."""

from pathlib import Path

import pytest

from nereus.broker.config_file import BROKER, KEYS, STANDALONE, ConfigError, parse_properties, resolve, suggest

EXAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "standalone.conf"


def values(text: str, command: str = STANDALONE):
    return resolve(parse_properties(text), command)


def test_properties_format_separators_comments_continuations_and_escapes():
    text = ("# a comment\n! another\n\n   brokerServicePort = 6651  \nwebServicePort:8081\nbindAddress 0.0.0.0\n"
            "clusterName=one\\\n    two\nkey\\=with\\:separators=v\nunicode=\\u00e9t\\u00e9\nempty=\nbare\n"
            "path=C:\\\\data\\\\x\n")
    assert parse_properties(text) == [
        (4, "brokerServicePort", "6651"), (5, "webServicePort", "8081"), (6, "bindAddress", "0.0.0.0"),
        (7, "clusterName", "onetwo"), (9, "key=with:separators", "v"), (10, "unicode", "été"),
        (11, "empty", ""), (12, "bare", ""), (13, "path", "C:\\data\\x")]


def test_a_backslash_escaped_by_another_does_not_continue_the_line():
    assert parse_properties("a=x\\\\\nb=y\n") == [(1, "a", "x\\"), (2, "b", "y")]


def test_pulsar_and_kop_names_map_to_the_options():
    got = values("brokerServicePort=7650\nwebServicePort=7080\nbindAddress=0.0.0.0\nadvertisedAddress=b1.example\n"
                 "kafkaListeners=PLAINTEXT://0.0.0.0:19092\nallowAutoTopicCreation=false\ndefaultNumPartitions=3\n"
                 "brokerDeduplicationEnabled=false\nmaxMessageSize=1048576\nclusterName=prod\n"
                 "metadataStoreSessionTimeoutMillis=30000\n")
    assert got.values == {"pulsar_port": 7650, "http_port": 7080, "bind": "0.0.0.0", "advertised_address": "b1.example",
                          "kafka_port": 19092, "auto_topic_creation": False, "default_partitions": 3,
                          "deduplication": False, "max_message_size": 1048576, "cluster_name": "prod",
                          "session_timeout": 30.0}
    assert got.sources["session_timeout"] == ("metadataStoreSessionTimeoutMillis", "30000")
    assert not got.ignored and not got.unknown and not got.notes


def test_the_kafka_listener_host_binds_when_no_bind_address_is_given():
    assert values("kafkaListeners=PLAINTEXT://10.0.0.5:9093\n").values == {"kafka_port": 9093, "bind": "10.0.0.5"}
    got = values("bindAddress=0.0.0.0\nkafkaListeners=PLAINTEXT://10.0.0.5:9093\n")
    assert got.values == {"bind": "0.0.0.0", "kafka_port": 9093}
    assert got.notes == ["kafkaListeners host 10.0.0.5 is not used: every listener binds to bindAddress 0.0.0.0"]


def test_kafka_advertised_listeners_give_the_advertised_host_unless_advertised_address_does():
    assert values("kafkaAdvertisedListeners=PLAINTEXT://ext.example:9092\n").values == {
        "advertised_address": "ext.example"}
    got = values("advertisedAddress=int.example\nkafkaListeners=PLAINTEXT://:9092\n"
                 "kafkaAdvertisedListeners=PLAINTEXT://ext.example:19092\n")
    assert got.values == {"advertised_address": "int.example", "kafka_port": 9092}
    assert len(got.notes) == 2 and "ext.example" in got.notes[0] and "19092" in got.notes[1]


def test_one_plaintext_listener_among_others_is_used_and_tls_alone_turns_plaintext_off():
    assert values("kafkaListeners=SSL://h:9093,PLAINTEXT://h:9092\n").values["kafka_port"] == 9092
    alone = values("kafkaListeners=SSL://h:9093\n").values
    assert alone["kafka_plaintext"] is False and alone["kafka_ssl_port"] == 9093 and "kafka_port" not in alone
    with pytest.raises(ConfigError) as info:
        values("kafkaListeners=SSL://h:9093,SSL://h:9094\n")
    assert info.value.key == "kafkaListeners" and "SSL://h:9094" in str(info.value)


@pytest.mark.parametrize("line,key", [
    ("brokerServicePort=66x50", "brokerServicePort"),
    ("allowAutoTopicCreation=yes", "allowAutoTopicCreation"),
    ("allowAutoTopicCreationType=sometimes", "allowAutoTopicCreationType"),
    ("kafkaListeners=localhost:9092", "kafkaListeners"),
    ("kafkaListeners=PLAINTEXT://h:99999", "kafkaListeners"),
    ("gcIntervalSeconds=soon", "gcIntervalSeconds"),
])
def test_an_invalid_value_names_the_key_and_the_value(line, key):
    with pytest.raises(ConfigError) as info:
        values(line + "\n")
    key_part, value = line.split("=", 1)
    assert info.value.key == key and info.value.value == value
    assert key in str(info.value) and repr(value) in str(info.value)


def test_two_names_of_one_setting_must_agree():
    assert values("defaultNumPartitions=4\nnum.partitions=4\n").values == {"default_partitions": 4}
    with pytest.raises(ConfigError) as info:
        values("defaultNumPartitions=4\nnum.partitions=2\n")
    assert "num.partitions" in str(info.value) and "defaultNumPartitions=4" in str(info.value)


def test_the_last_occurrence_of_a_key_wins():
    assert values("brokerServicePort=1\nbrokerServicePort=2\n").values == {"pulsar_port": 2}


def test_keys_without_use_are_ignored_and_misspelt_keys_reported_apart():
    got = values("zookeeperServers=zk:2181\nbookkeeperClientTimeoutInSeconds=30\nmanagedLedgerCacheSizeMB=64\n"
                 "tlsProtocols=TLSv1.3\nbrokerServicePrt=6650\nmetadataStoreUrl=zk:localhost:2181\n"
                 "haProxyProtocolEnabled=false\nwebServicePot=8081\n"
                 "group.share.min.record.lock.duration.ms=1000\n")
    assert got.ignored == ["zookeeperServers", "bookkeeperClientTimeoutInSeconds", "managedLedgerCacheSizeMB",
                           "tlsProtocols", "metadataStoreUrl",  # a standalone has its own metadata
                           "haProxyProtocolEnabled",
                           "group.share.min.record.lock.duration.ms"]  # Kafka's, not a misspelt key
    assert got.unknown == ["brokerServicePrt", "webServicePot"]
    assert [suggest(name) for name in got.unknown] == ["brokerServicePort", "webServicePort"]
    assert got.values == {}


def test_a_blank_value_leaves_the_default():
    got = values("bindAddress=\nadvertisedAddress=\nclusterName=\nnumIOThreads=\nwebServicePort=8081\n")
    assert got.values == {"http_port": 8081} and not got.ignored and not got.unknown


def test_keys_of_one_command_only():
    text = "metadataStoreUrl=oxia://m:6648\nmetadataStoreOperationTimeoutSeconds=5\ndataDir=/d\nnumBrokers=2\n"
    assert values(text, BROKER).values == {"metadata": "oxia://m:6648", "metadata_timeout": 5.0}
    assert values(text, BROKER).ignored == ["dataDir", "numBrokers"]
    assert values(text, STANDALONE).values == {"data_dir": "/d", "brokers": 2}


def test_partitioned_auto_creation_is_an_option():
    got = values("allowAutoTopicCreationType=partitioned\n")
    assert got.values == {"auto_topic_creation_type": "partitioned"} and not got.notes


def test_the_shipped_example_parses_with_no_unknown_or_ignored_key_and_documents_every_key():
    text = EXAMPLE.read_text()
    for command in (STANDALONE, BROKER):
        got = values(text, command)
        assert not got.unknown and not got.notes
    assert values(text, STANDALONE).ignored == []
    documented = {key for _, key, _ in parse_properties(text.replace("\n#", "\n"))}
    missing = set(KEYS) - documented - {"num.partitions"}  # named in defaultNumPartitions' comment
    assert not missing, missing


def test_default_retention_of_namespaces_without_a_policy():
    got = values("defaultRetentionTimeInMinutes=0\ndefaultRetentionSizeInMB=-1\n")
    assert got.values == {"default_retention_minutes": 0, "default_retention_mb": -1}
    assert not got.unknown and not got.ignored and not got.notes


def test_turning_auto_creation_off_applies_without_a_note():
    got = values("allowAutoTopicCreation=false\n")
    assert got.values == {"auto_topic_creation": False} and not got.notes


def test_sasl_listeners_beside_plaintext_and_their_mechanisms():
    got = values("kafkaListeners=PLAINTEXT://h:9092,SASL_PLAINTEXT://h:9094,SASL_SSL://h:9095\n"
                 "saslAllowedMechanisms=scram-sha-512,PLAIN\n")
    assert (got.values["kafka_port"], got.values["kafka_sasl_port"], got.values["kafka_sasl_ssl_port"]) == (
        9092, 9094, 9095)
    assert got.values["sasl_mechanisms"] == "SCRAM-SHA-512,PLAIN"
    with pytest.raises(ConfigError) as info:
        values("saslAllowedMechanisms=GSSAPI\n")
    assert info.value.key == "saslAllowedMechanisms"
