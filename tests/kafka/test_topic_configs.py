"""Topic and broker configs through confluent-kafka's AdminClient against a real standalone."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic)

TIMEOUT = 20


@pytest.fixture(scope="module")
def client(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def create(client, topic, **kw):
    client.create_topics([NewTopic(topic, **kw)], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)


def describe(client, topic, kind=ConfigResource.Type.TOPIC):
    res = ConfigResource(kind, topic)
    return client.describe_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)


def error_of(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0]


def test_create_with_configs_reports_them_as_dynamic_topic_configs(client, topic):
    create(client, topic, num_partitions=2, config={"retention.ms": "3600000", "cleanup.policy": "compact,delete",
                                                     "max.message.bytes": "2048"})
    configs = describe(client, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "compact,delete"
    assert configs["max.message.bytes"].value == "2048"
    # not set on the topic: the broker's static option, and Kafka's own default
    assert configs["compression.type"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["compression.type"].is_default
    assert configs["message.timestamp.type"].value == "CreateTime"


def test_unknown_name_or_bad_value_is_invalid_config(client, topic):
    for config in ({"no.such.config": "1"}, {"retention.ms": "soon"}, {"cleanup.policy": "forever"},
                   {"message.timestamp.type": "WallClock"}, {"min.insync.replicas": "0"}):
        futures = client.create_topics([NewTopic(topic, 1, config=config)], operation_timeout=TIMEOUT)
        err = error_of(futures[topic])
        assert err.code() == KafkaError.INVALID_CONFIG, (config, err)
        assert list(config)[0] in err.str()
    assert topic not in client.list_topics(timeout=TIMEOUT).topics


def test_validate_only_creates_nothing(client, topic):
    futures = client.create_topics([NewTopic(topic, 3, config={"retention.bytes": "1000"})], validate_only=True,
                                   operation_timeout=TIMEOUT)
    futures[topic].result(TIMEOUT)
    assert topic not in client.list_topics(timeout=TIMEOUT).topics
    futures = client.create_topics([NewTopic(topic, 3, config={"retention.bytes": "x"})], validate_only=True,
                                   operation_timeout=TIMEOUT)
    assert error_of(futures[topic]).code() == KafkaError.INVALID_CONFIG


def test_alter_configs_replaces_every_set_config(client, topic):
    create(client, topic, num_partitions=1, config={"retention.ms": "1000000", "segment.ms": "100000"})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.bytes": "1048576"})
    client.alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)
    configs = describe(client, topic)
    assert configs["retention.bytes"].value == "1048576"
    assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value  # replaced away
    assert configs["segment.ms"].value == "604800000"

    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.bytes": "lots"})
    assert error_of(client.alter_configs([bad], request_timeout=TIMEOUT)[bad]).code() == KafkaError.INVALID_CONFIG
    assert describe(client, topic)["retention.bytes"].value == "1048576"


def test_incremental_set_delete_append_subtract(client, topic):
    create(client, topic, num_partitions=1, config={"retention.ms": "5000000"})

    def alter(*entries, validate_only=False):
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=list(entries))
        return client.incremental_alter_configs([res], validate_only=validate_only,
                                                request_timeout=TIMEOUT)[res]

    alter(ConfigEntry("message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET),
          ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)).result(TIMEOUT)
    configs = describe(client, topic)
    assert configs["message.timestamp.type"].value == "LogAppendTime"
    assert configs["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    alter(ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)).result(TIMEOUT)
    assert describe(client, topic)["cleanup.policy"].value == "delete,compact"
    alter(ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)).result(TIMEOUT)
    assert describe(client, topic)["cleanup.policy"].value == "compact"

    # APPEND is for list configs only; an unknown name is INVALID_CONFIG; validate_only changes nothing
    err = error_of(alter(ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)))
    assert err.code() == KafkaError.INVALID_REQUEST
    err = error_of(alter(ConfigEntry("retention.weeks", "1", incremental_operation=AlterConfigOpType.SET)))
    assert err.code() == KafkaError.INVALID_CONFIG
    alter(ConfigEntry("retention.ms", "7", incremental_operation=AlterConfigOpType.SET),
          validate_only=True).result(TIMEOUT)
    assert describe(client, topic)["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value


def test_describe_with_synonyms(client, topic):
    create(client, topic, num_partitions=1, config={"retention.ms": "60000"})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = client.describe_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)  # with synonyms
    synonyms = configs["retention.ms"].synonyms
    assert [(s.name, s.value) for s in synonyms.values()][0] == ("retention.ms", "60000")
    assert "log.retention.ms" in synonyms
    # Nereus's own default (8 MiB) is a default, as Kafka's would be: not a setting of this broker
    largest = configs["max.message.bytes"]
    assert (largest.value, largest.source, largest.is_default) == ("8388608", ConfigSource.DEFAULT_CONFIG.value, True)
    assert [(s.name, s.value) for s in largest.synonyms.values()] == [("message.max.bytes", "8388608")]


def test_unknown_topic(client, topic):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "1"})
    err = error_of(client.alter_configs([res], request_timeout=TIMEOUT)[res])
    assert err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_broker_dynamic_and_read_only_configs(client, topic):
    brokers = describe(client, "0", ConfigResource.Type.BROKER)
    assert brokers["num.partitions"].is_read_only
    listeners = brokers["advertised.listeners"]
    assert listeners.is_read_only and listeners.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert listeners.value.startswith("PLAINTEXT://") and listeners.value.count("://") == 1
    assert not brokers["log.retention.ms"].is_read_only

    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)])
    err = error_of(client.incremental_alter_configs([res], request_timeout=TIMEOUT)[res])
    assert err.code() == KafkaError.INVALID_REQUEST and "num.partitions" in err.str()

    # a dynamic broker default applies to topics that do not set the config
    create(client, topic, num_partitions=1)
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.message.timestamp.type", "LogAppendTime", incremental_operation=AlterConfigOpType.SET)])
    client.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)
    try:
        assert describe(client, "0", ConfigResource.Type.BROKER)["log.message.timestamp.type"].source == \
            ConfigSource.DYNAMIC_BROKER_CONFIG.value
        entry = describe(client, topic)["message.timestamp.type"]
        assert (entry.value, entry.source) == ("LogAppendTime", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    finally:
        res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry("log.message.timestamp.type", None, incremental_operation=AlterConfigOpType.DELETE)])
        client.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(TIMEOUT)
    assert describe(client, topic)["message.timestamp.type"].value == "CreateTime"


def test_configs_go_with_the_topic(client, topic):
    create(client, topic, num_partitions=1, config={"retention.ms": "12345"})
    client.delete_topics([topic], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)
    create(client, topic, num_partitions=1)
    assert describe(client, topic)["retention.ms"].value == "-1"


def test_replica_assignments_name_registered_brokers(client, topic):
    futures = client.create_topics([NewTopic(topic, 2, replica_assignment=[[0], [7]])], operation_timeout=TIMEOUT)
    assert error_of(futures[topic]).code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    create(client, topic, num_partitions=2, replica_assignment=[[0], [0]])
    meta = client.list_topics(topic, timeout=TIMEOUT).topics[topic]
    assert sorted(meta.partitions) == [0, 1]
    assert all(p.replicas == [0] and p.isrs == [0] for p in meta.partitions.values())
