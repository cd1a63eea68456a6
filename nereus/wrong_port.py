"""A TLS client on a plaintext listener: recognised at its first bytes, told in one line.

A TLS ClientHello starts with a handshake record header: content type 0x16, then the
major version 3. Read as a Pulsar or Kafka frame, those bytes announce a frame of
some 369 MB, so without this check the broker refuses every retry of the client as
an oversized frame while the client only sees a timeout. Such a connection is closed
at once, counted in ``nereus_tls_handshakes_on_plaintext_total``, and logged at most
once a minute per listener with where the client should go instead. No real frame of
either protocol starts with these bytes: it would exceed any frame limit.
"""

from __future__ import annotations

import logging
import time

from prometheus_client import Counter

log = logging.getLogger(__name__)

TLS_ON_PLAINTEXT = Counter("nereus_tls_handshakes_on_plaintext", "Connections that opened a TLS handshake "
                           "on a plaintext listener (closed at once)", ["listener"])
#: Seconds between two log lines of one listener.
LOG_INTERVAL = 60.0

_last_logged: dict[str, float] = {}
_unlogged: dict[str, int] = {}


def opens_tls_handshake(first_bytes: bytes | bytearray | memoryview) -> bool:
    """Whether a connection's first bytes are a TLS handshake record (a ClientHello), not a frame."""
    return len(first_bytes) >= 2 and first_bytes[0] == 0x16 and first_bytes[1] == 0x03


def report_tls_on_plaintext(listener: str, peer: str, hint: str, *, clock=time.monotonic) -> None:
    """Count and (rate-limited) log a TLS client met on the plaintext ``listener``; ``hint``: where to go."""
    TLS_ON_PLAINTEXT.labels(listener).inc()
    now = clock()
    last = _last_logged.get(listener)
    if last is not None and now - last < LOG_INTERVAL:
        _unlogged[listener] = _unlogged.get(listener, 0) + 1
        return
    _last_logged[listener] = now
    more = _unlogged.pop(listener, 0)
    also = f" ({more} more since the last such line)" if more else ""
    log.warning("TLS handshake on the plaintext %s listener from %s; %s%s", listener, peer, hint, also)


__all__ = ["LOG_INTERVAL", "TLS_ON_PLAINTEXT", "opens_tls_handshake", "report_tls_on_plaintext"]
