"""Per-topic traffic, whichever protocol carries it.

Pulsar producers and Kafka Produce count into the same ``pulsar_in_*`` series,
Pulsar dispatch and Kafka Fetch into the same ``pulsar_out_*`` series, so a topic
written by one protocol and read by the other shows both sides in ``/metrics``
and in its topic stats. Kafka reads carry the subscription label ``""`` (no
Pulsar subscription has an empty name): ``sum by (topic)`` covers both protocols.
"""

from __future__ import annotations

import time
from typing import Callable

from prometheus_client import Counter

from .rates import RateMeter

IN_MESSAGES = Counter("pulsar_in_messages", "Messages published to the topic (Pulsar and Kafka)", ["topic"])
IN_BYTES = Counter("pulsar_in_bytes", "Bytes published to the topic (Pulsar and Kafka)", ["topic"])
OUT_MESSAGES = Counter("pulsar_out_messages", "Messages delivered to readers (Kafka reads: subscription \"\")",
                       ["topic", "subscription"])
OUT_BYTES = Counter("pulsar_out_bytes", "Bytes delivered to readers (Kafka reads: subscription \"\")",
                    ["topic", "subscription"])

#: The subscription label of what Kafka consumers fetch.
KAFKA_READS = ""


class TopicTraffic:
    """What went in and out of one loaded topic: counters, and meters for the rates."""

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        self.inbound = RateMeter(clock)
        self.outbound: dict[str, RateMeter] = {}  # subscription (KAFKA_READS for Kafka) -> meter
        self._in = (IN_MESSAGES.labels(name), IN_BYTES.labels(name))  # looked up once, not per message
        self._out: dict[str, tuple] = {}

    def published(self, messages: int, size: int) -> None:
        """A committed append of ``messages`` messages, ``size`` bytes."""
        self.inbound.record(messages, size)
        self._in[0].inc(messages)
        self._in[1].inc(size)

    def delivered(self, subscription: str, messages: int, size: int) -> None:
        """Messages sent to a subscription's consumer, or (``KAFKA_READS``) to a Kafka fetch."""
        self.meter(subscription).record(messages, size)
        counters = self._out.get(subscription)
        if counters is None:
            counters = self._out[subscription] = (OUT_MESSAGES.labels(self.name, subscription),
                                                  OUT_BYTES.labels(self.name, subscription))
        counters[0].inc(messages)
        counters[1].inc(size)

    def meter(self, subscription: str) -> RateMeter:
        """The delivery meter of a subscription (created on first use)."""
        meter = self.outbound.get(subscription)
        if meter is None:
            meter = self.outbound[subscription] = RateMeter(self.clock)
        return meter

    def forget(self, subscription: str) -> None:
        """A deleted subscription: drop its meter and series."""
        self.outbound.pop(subscription, None)
        if self._out.pop(subscription, None) is not None:
            _remove(OUT_MESSAGES, self.name, subscription)
            _remove(OUT_BYTES, self.name, subscription)

    def close(self) -> None:
        """The topic unloaded: drop its series (a label set per topic ever loaded would grow without bound)."""
        _remove(IN_MESSAGES, self.name)
        _remove(IN_BYTES, self.name)
        for subscription in list(self._out):
            self.forget(subscription)


def _remove(counter: Counter, *labels: str) -> None:
    try:
        counter.remove(*labels)
    except KeyError:
        pass
