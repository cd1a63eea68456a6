"""Consumer group lag, a Prometheus series computed off the scrape.

The lag is a committed offset against the partition's log end. A scrape returns the
last computed values and, when they are older than ``LAG_REFRESH_SECONDS``, starts a
new computation on the event loop, so a scrape never waits on the metadata plane.
Each broker reports the groups it coordinates, so the series of a cluster do not repeat.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Callable
from urllib.parse import unquote

from prometheus_client.core import GaugeMetricFamily

from .... import scraped
from ....scraped import RefreshedCollector
from ....storage import view
from .offsets import OFFSETS_ROOT

log = logging.getLogger(__name__)

#: Seconds a computed lag is served before a scrape starts the next computation.
LAG_REFRESH_SECONDS = 5.0
#: Committed offsets looked at per computation (bounds the work of one refresh).
MAX_LAG_ROWS = 50_000
_END = "\U0010ffff"
# Offsets are ``{root}{group}/{topic}:{partition}``: grandchildren of the root. In
# Oxia's key order (segment by segment, children before grandchildren) these form
# one span: from the empty group's empty name to the largest possible group's.
_OFFSETS_RANGE = (OFFSETS_ROOT + "/", OFFSETS_ROOT + _END + "/" + _END)


@dataclasses.dataclass(frozen=True, slots=True)
class LagRow:
    group: str
    topic: str
    partition: int
    committed: int
    log_end: int

    @property
    def lag(self) -> int:
        return max(0, self.log_end - self.committed)


class LagCollector(RefreshedCollector[list]):
    """``nereus_kafka_consumer_group_lag`` and committed offsets, recomputed in the background."""

    what = "kafka consumer group lag"

    def __init__(self, meta, catalog, is_coordinator: Callable[[str], bool], *,
                 refresh_seconds: float = LAG_REFRESH_SECONDS, clock=time.monotonic) -> None:
        super().__init__([], refresh_seconds=refresh_seconds, clock=clock)
        self.meta, self.catalog, self.is_coordinator = meta, catalog, is_coordinator

    @property
    def rows(self) -> list[LagRow]:
        return self.value

    def families(self, rows: list[LagRow]):
        lag = GaugeMetricFamily("nereus_kafka_consumer_group_lag",
                                "Messages between a group's committed offset and the partition's log end",
                                labels=["group", "topic", "partition"])
        committed = GaugeMetricFamily("nereus_kafka_consumer_group_committed_offset",
                                      "A group's committed offset", labels=["group", "topic", "partition"])
        for row in rows:
            labels = [row.group, row.topic, str(row.partition)]
            lag.add_metric(labels, row.lag)
            committed.add_metric(labels, row.committed)
        return [lag, committed]

    async def read(self) -> list[LagRow]:
        """One pass over the committed offsets of the groups this broker coordinates."""
        meta, catalog = self.meta, self.catalog
        ends: dict[tuple[str, int], int | None] = {}
        rows: list[LagRow] = []
        async for rec in meta.range_scan(*_OFFSETS_RANGE):
            quoted_group, _, rest = rec.key[len(OFFSETS_ROOT):].partition("/")
            quoted_topic, _, partition_text = rest.rpartition(":")
            group, topic, partition = unquote(quoted_group), unquote(quoted_topic), int(partition_text)
            if not self.is_coordinator(group):
                continue
            key = (topic, partition)
            if key not in ends:
                ends[key] = await self._log_end(catalog, meta, topic, partition)
            if ends[key] is None:
                continue  # the topic is gone
            rows.append(LagRow(group, topic, partition, int(json.loads(rec.value)["offset"]), ends[key]))
            if len(rows) >= MAX_LAG_ROWS:
                log.warning("kafka: consumer group lag covers the first %d committed offsets only", MAX_LAG_ROWS)
                break
        return rows

    @staticmethod
    async def _log_end(catalog, meta, topic: str, partition: int) -> int | None:
        stream = await catalog.stream_name(topic, partition)
        if stream is None:
            return None
        sid = await view.stream_id(meta, str(stream))
        if sid is None:
            return 0  # created lazily: nothing produced yet
        return (await view.bounds(meta, sid))[1]


def register(meta, catalog, is_coordinator: Callable[[str], bool]) -> LagCollector | None:
    """Register the lag collector; None when this process already has one (in-process clusters in tests)."""
    return scraped.register(LagCollector(meta, catalog, is_coordinator))


unregister = scraped.unregister


__all__ = ["LAG_REFRESH_SECONDS", "LagCollector", "LagRow", "register", "unregister"]
