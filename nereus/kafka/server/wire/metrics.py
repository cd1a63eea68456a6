"""Prometheus metrics of the Kafka requests (consumer group lag: ``groups/lag.py``).

Per API (``api`` is Kafka's request name, e.g. ``Produce``): requests, errors by
error code (once per distinct code in a response, as Kafka's ``ErrorsPerSec``
counts them) and the time from a request's arrival to its response being ready.
"""

from __future__ import annotations

import dataclasses
import typing
import functools
import time

from kio.schema.errors import ErrorCode
from prometheus_client import Counter, Histogram

from ....codec.kafka.protocol import SUPPORTED

REQUESTS = Counter("nereus_kafka_requests", "Kafka requests received", ["api"])
REQUEST_ERRORS = Counter("nereus_kafka_request_errors", "Kafka responses carrying an error code", ["api", "error"])
REQUEST_SECONDS = Histogram(
    "nereus_kafka_request_seconds", "Time from a Kafka request's arrival to its response (long polls included)",
    ["api"], buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)

def api_name(api_key: int) -> str:
    entry = SUPPORTED.get(api_key)
    return entry[0] if entry is not None else str(api_key)


def error_names(body) -> set[str]:
    """The distinct non-zero ``error_code`` values anywhere in a response, by Kafka's names."""
    found: set[str] = set()
    stack = [body]
    while stack:
        obj = stack.pop()
        has_code, nested = _walk_plan(type(obj))
        if has_code:
            code = obj.error_code
            if code:
                found.add(_error_name(code))
        for name in nested:
            value = getattr(obj, name)
            if isinstance(value, tuple):
                if value and _is_dataclass(type(value[0])):
                    stack.extend(value)
            elif value is not None and _is_dataclass(type(value)):
                stack.append(value)
    return found


# Planned once per class: every response is walked, and most fields hold numbers,
# strings or bytes that can hold no error code.
@functools.cache
def _walk_plan(cls: type) -> tuple[bool, tuple[str, ...]]:
    """(whether ``cls`` has an ``error_code``, its fields that may hold nested entities)."""
    fields = dataclasses.fields(cls)
    nested = tuple(f.name for f in fields if f.name != "error_code" and _may_nest(f.type))
    return any(f.name == "error_code" for f in fields), nested


def _may_nest(annotation) -> bool:
    """Whether a field so annotated may hold entities (unresolved annotations: assume so)."""
    if isinstance(annotation, str):
        return True
    if dataclasses.is_dataclass(annotation):
        return True
    return any(_may_nest(arg) for arg in typing.get_args(annotation) if arg is not Ellipsis)


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


__all__ = ["REQUESTS", "REQUEST_ERRORS", "REQUEST_SECONDS", "RequestTimer", "api_name", "error_names"]
