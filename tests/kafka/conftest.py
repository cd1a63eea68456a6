"""Fixtures: a real `nereus standalone` process and the three Kafka client libraries."""

from __future__ import annotations

import pytest

from tests.kafka.raw import RawKafka
from tests.standalone_fixtures import own_standalone, shared_standalone, unique_name
from tests.waiting import wait_until

broker = shared_standalone("broker", "kbroker")
fresh_broker = own_standalone("fresh_broker")
topic = unique_name("topic", "k")
group = unique_name("group", "g")


@pytest.fixture
def raw(broker):
    """A raw Kafka client of the shared standalone."""
    client = RawKafka(broker.bootstrap)
    yield client
    client.close()


__all__ = ["wait_until"]
