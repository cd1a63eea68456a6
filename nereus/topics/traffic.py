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

from .rates import RateMeter

#: The subscription label of what Kafka consumers fetch.
KAFKA_READS = ""


class TopicTraffic:
    """What went in and out of one loaded topic: the meters count and rate it; the broker's metrics
    collector reads them at scrape time (``pulsar_in_*`` / ``pulsar_out_*``), so a loaded topic
    holds no metric series of its own."""

    __slots__ = ("name", "clock", "inbound", "outbound")

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.clock = clock
        self.inbound = RateMeter(clock)
        self.outbound: dict[str, RateMeter] = {}  # subscription (KAFKA_READS for Kafka) -> meter

    def published(self, messages: int, size: int) -> None:
        """A committed append of ``messages`` messages, ``size`` bytes."""
        self.inbound.record(messages, size)

    def delivered(self, subscription: str, messages: int, size: int) -> None:
        """Messages sent to a subscription's consumer, or (``KAFKA_READS``) to a Kafka fetch."""
        self.meter(subscription).record(messages, size)

    def meter(self, subscription: str) -> RateMeter:
        """The delivery meter of a subscription (created on first use)."""
        meter = self.outbound.get(subscription)
        if meter is None:
            meter = self.outbound[subscription] = RateMeter(self.clock)
        return meter

    def forget(self, subscription: str) -> None:
        """A deleted subscription: drop its meter (and so its series)."""
        self.outbound.pop(subscription, None)

    def close(self) -> None:
        """The topic unloaded: its series go with it (the collector reads loaded topics only)."""
        self.outbound.clear()
