"""Where a broker config's value comes from (DescribeConfigs' source): the broker's options, or its
own defaults where they differ from Kafka's."""

import pytest

from nereus.kafka.server.catalog import config_defs as defs
from nereus.kafka.server.catalog.configs import TopicConfigs
from nereus.kafka.server.catalog.routing import LocalBroker


@pytest.fixture
def meta(memory_meta):
    return memory_meta


def _configs(meta, **kw) -> TopicConfigs:
    return TopicConfigs(meta, LocalBroker(0, "h"), default_partitions=1, auto_create=True, **kw)


async def test_the_largest_message_is_a_default_unless_an_option_sets_it(meta):
    unset = (await _configs(meta, max_message_bytes=None).topic("t"))["max.message.bytes"]
    assert (unset.value, unset.source) == (str(8 << 20), defs.DEFAULT_CONFIG)
    assert unset.synonyms == (("message.max.bytes", str(8 << 20), defs.DEFAULT_CONFIG),)
    configured = (await _configs(meta, max_message_bytes=1 << 20).topic("t"))["max.message.bytes"]
    assert (configured.value, configured.source) == (str(1 << 20), defs.STATIC_BROKER_CONFIG)


async def test_options_give_static_broker_configs(meta):
    configs = _configs(meta, max_message_bytes=None, static={"group.share.record.lock.duration.ms": "1000"})
    broker = defs.resolve_broker(await configs.broker_layers())
    lock = broker["group.share.record.lock.duration.ms"]
    assert (lock.value, lock.source) == ("1000", defs.STATIC_BROKER_CONFIG)
    assert broker["group.share.delivery.count.limit"].source == defs.DEFAULT_CONFIG
    group = await configs.group("g")
    assert (group["share.record.lock.duration.ms"].value, group["share.isolation.level"].value) == (
        "1000", "read_uncommitted")
