"""Prometheus metrics of the Kafka listener.

Per API (``api`` is Kafka's request name, e.g. ``Produce``): requests, errors by
error code (once per distinct code in a response, as Kafka's ``ErrorsPerSec``
counts them) and the time from a request's arrival to its response being ready.

Consumer group lag (committed offset against the partition's log end) is computed
off the scrape: a scrape returns the last computed values and, when they are older
than ``LAG_REFRESH_SECONDS``, starts a new computation on the event loop, so a
scrape never waits on the metadata plane. Each broker reports the groups it
coordinates, so the series of a cluster do not repeat.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from urllib.parse import unquote

from kio.schema.errors import ErrorCode
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from .... import scraped
from ....scraped import RefreshedCollector
from ....storage import view
from ....codec.kafka.protocol import SUPPORTED
from ..catalog import routing
from ..groups.coordinator import OFFSETS_ROOT

log = logging.getLogger(__name__)

REQUESTS = Counter("nereus_kafka_requests", "Kafka requests received", ["api"])
REQUEST_ERRORS = Counter("nereus_kafka_request_errors", "Kafka responses carrying an error code", ["api", "error"])
REQUEST_SECONDS = Histogram(
    "nereus_kafka_request_seconds", "Time from a Kafka request's arrival to its response (long polls included)",
    ["api"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

#: Seconds a computed lag is served before a scrape starts the next computation.
LAG_REFRESH_SECONDS = 5.0
#: Committed offsets looked at per computation (bounds the work of one refresh).
MAX_LAG_ROWS = 50_000
_END = "\U0010ffff"
# Offsets are ``{root}{group}/{topic}:{partition}``: grandchildren of the root. In
# Oxia's key order (segment by segment, children before grandchildren) these form
# one span: from the empty group's empty name to the largest possible group's.
_OFFSETS_RANGE = (OFFSETS_ROOT + "/", OFFSETS_ROOT + _END + "/" + _END)


def api_name(api_key: int) -> str:
    entry = SUPPORTED.get(api_key)
    return entry[0] if entry is not None else str(api_key)


def error_names(body) -> set[str]:
    """The distinct non-zero ``error_code`` values anywhere in a response, by Kafka's names."""
    found: set[str] = set()
    stack = [body]
    while stack:
        obj = stack.pop()
        for name in _field_names(type(obj)):
            value = getattr(obj, name)
            if name == "error_code":
                if value:
                    found.add(_error_name(value))
            elif isinstance(value, tuple):
                stack.extend(v for v in value if _is_dataclass(type(v)))
            elif _is_dataclass(type(value)):
                stack.append(value)
    return found


# Looked up once per class: every response is walked.
@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


@functools.cache
def _is_dataclass(cls: type) -> bool:
    return dataclasses.is_dataclass(cls)


def _error_name(code) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(int(code))


class RequestTimer:
    """Counts one request and, once its response is ready, its latency and errors."""

    __slots__ = ("api", "seconds", "started")

    def __init__(self, api_key: int) -> None:
        self.api, count, self.seconds = _per_api(api_key)
        self.started = time.monotonic()
        count.inc()

    def done(self, body) -> None:
        self.seconds.observe(time.monotonic() - self.started)
        if body is not None and _is_dataclass(type(body)):
            for name in error_names(body):
                REQUEST_ERRORS.labels(self.api, name).inc()

    def failed(self) -> None:
        """The handler raised: the connection closes without a response."""
        self.seconds.observe(time.monotonic() - self.started)
        REQUEST_ERRORS.labels(self.api, "UNKNOWN_SERVER_ERROR").inc()


@functools.cache
def _per_api(api_key: int) -> tuple:
    """(API name, its request counter, its latency histogram): labelled once per API, not per request."""
    api = api_name(api_key)
    return api, REQUESTS.labels(api), REQUEST_SECONDS.labels(api)


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

    def __init__(self, service, *, refresh_seconds: float = LAG_REFRESH_SECONDS, clock=time.monotonic) -> None:
        super().__init__([], refresh_seconds=refresh_seconds, clock=clock)
        self.service = service

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
        meta, catalog = self.service.meta, self.service.catalog
        ends: dict[tuple[str, int], int | None] = {}
        rows: list[LagRow] = []
        async for rec in meta.range_scan(*_OFFSETS_RANGE):
            quoted_group, _, rest = rec.key[len(OFFSETS_ROOT):].partition("/")
            quoted_topic, _, partition_text = rest.rpartition(":")
            group, topic, partition = unquote(quoted_group), unquote(quoted_topic), int(partition_text)
            if not routing.is_coordinator(self.service, group):
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


def register(service) -> LagCollector | None:
    """Register the lag collector; None when this process already has one (in-process clusters in tests)."""
    return scraped.register(LagCollector(service))


unregister = scraped.unregister
