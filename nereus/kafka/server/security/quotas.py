"""Client quotas: their enforcement (the admin APIs are ``quota_api.py``).

Every quota is a token bucket (``nereus.topics.throttle``) per (user, client id), or
per IP address for connections, enforced as a Kafka broker does:

- ``producer_byte_rate`` / ``consumer_byte_rate``: a Produce or Fetch that takes a
  client over its rate is answered with ``throttle_time_ms`` and its connection is
  muted that long (KIP-219); a Fetch arriving while the client still owes bytes gets
  an empty response carrying the time left.
- ``request_percentage`` (KIP-124): the share of one request-handling thread's time a
  client's requests may take (100 = a whole thread); the time spent handling each
  request (not a long poll's or a durable append's wait) is counted, and a client over
  its share gets the throttle time on that response and is muted (at most a second,
  as Kafka bounds it to its quota window). ApiVersions and the SASL requests are exempt.
- ``controller_mutation_rate`` (KIP-599): partitions created (CreateTopics,
  CreatePartitions) or deleted (DeleteTopics) a second, with a burst of 11 seconds'
  worth (Kafka's controller.quota.window.num x controller.quota.window.size.seconds).
  A topic is admitted while the client's bucket is not overdrawn, whatever its size
  (the bucket may go as far below zero as it takes); once overdrawn, the topics of
  the client's requests are refused with THROTTLING_QUOTA_EXCEEDED from CreateTopics
  v6, DeleteTopics v5 and CreatePartitions v3, and such a response carries the
  throttle time (the time the bucket takes back to zero) and mutes the connection
  that long. Older versions are served, and a response that leaves the bucket
  overdrawn carries the throttle time and mutes. As in Kafka, that throttle time is
  not bounded by a window: it is what pays the mutations back.
- ``connection_creation_rate`` (``ip`` entity, KIP-612): new connections a second
  from one address; one over the rate is closed as it is accepted. The broker's
  ``max.connection.creation.rate`` bounds new connections from all addresses: one
  over it is accepted but not served until the rate allows it (Kafka's acceptor waits).
"""

from __future__ import annotations

import dataclasses
import datetime
import time

from ....topics.throttle import TokenBucket
from ....codec.kafka import NO_THROTTLE

PRODUCE, FETCH = "producer_byte_rate", "consumer_byte_rate"
REQUEST, MUTATION = "request_percentage", "controller_mutation_rate"
#: Tokens a quota's unit is worth a second: request_percentage counts milliseconds of handling.
_SCALE = {REQUEST: 10.0}
#: The longest throttle time a quota gives (and the debt it keeps): Kafka bounds the request
#: quota's to its one-second window, so a burst is not paid for long after. It bounds no
#: other: a controller mutation's debt is paid back whole (KIP-599).
_MAX_THROTTLE_SECONDS = {REQUEST: 1.0}
#: Seconds of its rate a quota's bucket holds: the burst a client may spend at once. Kafka's
#: controller mutation bucket holds controller.quota.window.num (11) windows of
#: controller.quota.window.size.seconds (1).
_BURST_SECONDS = {MUTATION: 11.0}
#: throttle_time_ms is an int32 on the wire; a tiny mutation rate's debt may be longer.
_MAX_THROTTLE_MS = 2**31 - 1
_MAX_IDLE_BUCKETS = 1024


class Throttles:
    """The byte-rate buckets of the clients that have a quota."""

    def __init__(self, store, clock=time.monotonic) -> None:
        self.store = store
        self._clock = clock
        self._buckets: dict[tuple[str, str | None, str | None], TokenBucket] = {}

    def _bucket(self, key: str, user: str | None, client_id: str | None) -> TokenBucket | None:
        rate = self.store.quota(key, user, client_id)
        if rate is not None:
            rate *= _SCALE.get(key, 1.0)
        ident = (key, user, client_id)
        if rate is None or rate <= 0:
            self._buckets.pop(ident, None)
            return None
        bucket = self._buckets.get(ident)
        if bucket is None or bucket.rate != rate:
            if len(self._buckets) >= _MAX_IDLE_BUCKETS:
                self._forget_full()
            bucket = self._buckets[ident] = TokenBucket(rate, _BURST_SECONDS.get(key, 1.0), clock=self._clock)
        return bucket

    def _forget_full(self) -> None:
        """Drop the buckets of clients that owe nothing (many client ids under a default quota)."""
        for ident, bucket in list(self._buckets.items()):
            bucket.delay()  # refills
            if bucket.tokens >= bucket.capacity:
                del self._buckets[ident]

    def record(self, key: str, user: str | None, client_id: str | None, size: int) -> int:
        """Count ``size`` bytes; the throttle time in ms they cause (0: within the quota)."""
        bucket = self._bucket(key, user, client_id)
        if bucket is None:
            return 0
        bucket.take(size)
        bound = _MAX_THROTTLE_SECONDS.get(key)
        if bound is not None:
            bucket.tokens = max(bucket.tokens, -bucket.rate * bound)
        return _ms(bucket.delay())

    def owed(self, key: str, user: str | None, client_id: str | None) -> int:
        """The throttle time in ms still owed, without counting anything."""
        bucket = self._bucket(key, user, client_id)
        return _ms(bucket.delay()) if bucket is not None else 0

    async def refresh(self) -> None:
        """Read the stored quotas again if this broker's copy is stale."""
        await self.store.current()

    async def charge(self, conn, key: str, client_id: str | None, amount: float) -> int:
        """Count ``amount`` against the client's ``key`` quota; the throttle time in ms, for which
        ``conn`` is muted (0: within the quota, or none)."""
        if self.store.loaded:  # no metadata read on the request's path, only a stale copy's refresh
            self.store.refresh_if_stale()
        else:
            await self.store.current()
        ms = self.record(key, conn.principal, client_id, amount)
        if ms:
            conn.mute(ms)
        return ms


class ConnectionRates:
    """The ``connection_creation_rate`` buckets of the client addresses that have one."""

    def __init__(self, store, clock=time.monotonic, *, broker_rate: float = 0) -> None:
        self.store = store
        self._clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        if broker_rate < 0:
            raise ValueError("max.connection.creation.rate must be >= 0")
        self._broker = TokenBucket(broker_rate, clock=clock) if broker_rate > 0 else None

    def broker_delay(self) -> float:
        """Count a new connection against the broker's rate; the seconds it waits before being served."""
        if self._broker is None:
            return 0.0
        delay = self._broker.delay()
        self._broker.take(1)
        return delay

    def admit(self, ip: str) -> bool:
        """Count a new connection from ``ip``; False when it is over the address' rate (close it)."""
        rate = self.store.ip_quota(ip)
        if rate is None or rate <= 0:
            self._buckets.pop(ip, None)
            return True
        bucket = self._buckets.get(ip)
        if bucket is None or bucket.rate != rate:
            if len(self._buckets) >= _MAX_IDLE_BUCKETS:
                self._forget_full()
            bucket = self._buckets[ip] = TokenBucket(rate, clock=self._clock)
        if bucket.delay() > 0:
            return False
        bucket.take(1)
        return True

    def _forget_full(self) -> None:
        for ip, bucket in list(self._buckets.items()):
            bucket.delay()  # refills
            if bucket.tokens >= bucket.capacity:
                del self._buckets[ip]


def with_throttle(body, ms: int):
    """``body`` answering ``ms`` of throttle time at least (unchanged when it has no throttle_time)."""
    if not ms or body is None or not hasattr(body, "throttle_time"):
        return body
    if body.throttle_time is not None and body.throttle_time.total_seconds() * 1000 >= ms:
        return body
    return dataclasses.replace(body, throttle_time=throttle_time(ms))


def _ms(seconds: float) -> int:
    return min(_MAX_THROTTLE_MS, int(seconds * 1000 + 0.999)) if seconds > 0 else 0


def throttle_time(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms) if ms else NO_THROTTLE


__all__ = ["ConnectionRates", "FETCH", "MUTATION", "PRODUCE", "REQUEST", "Throttles", "throttle_time", "with_throttle"]
