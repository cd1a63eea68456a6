"""One Kafka client connection: framing, dispatch and in-order responses.

Frames are views of the received bytes (``codec.kafka.framing``) and responses go out as
chunks through ``writelines`` (a Fetch's record batches as views of the stored entries).

Requests are started in arrival order (a handler's synchronous part runs before
the next request is looked at, so Produce appends keep their order); a handler
may return an awaitable for the part that waits (durable appends, long polls).
Responses are written strictly in request order, as Kafka clients require.
Undecodable or oversized frames, and requests for unknown API keys or versions
(other than ApiVersions), close the connection; the broker carries on. On a SASL
listener, ``security/sasl.py`` decides what is served before authentication.
Handlers (``dispatch.py``) get the connection for its client: principal, peer,
listener, mutes.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import struct
import time
from collections import deque

from ....net_limits import WRITE_BUFFER_HIGH, FrameTimer, peer_address
from ....tls import peer_cert_cn
from ....wrong_port import opens_tls_handshake, report_tls_on_plaintext
from ....codec.kafka import MalformedRequest, decode_request, peek_head, supported
from ....codec.kafka.framing import FrameSizeError, RequestFramer
from ....codec.kafka.protocol import API_VERSIONS, encode_response_chunks
from ..security.quotas import REQUEST, with_throttle
from ..security.sasl import SaslSession
from ..security.sasl_api import raw_token
from .metrics import RequestTimer
from .versions import api_versions_response

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_API_KEY = struct.Struct(">h")
MAX_PENDING = 128  # responses queued per connection before reading pauses
MAX_IN_FLIGHT = 32  # requests started and not yet answered per connection (Produce: up to MAX_PENDING)
_PRODUCE = 0
_BEFORE_AUTHENTICATION = frozenset({API_VERSIONS, 17, 36})  # ApiVersions, SaslHandshake, SaslAuthenticate


class KafkaConnection(asyncio.Protocol):
    def __init__(self, service, *, protocol: str = "PLAINTEXT") -> None:
        self.service = service
        self.protocol = protocol  # the security protocol of the listener the client came by
        self.sasl = SaslSession(service.scram, service.sasl) if protocol.startswith("SASL_") else None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.peer_cert_cn: str | None = None  # the verified client certificate's CN (SSL listeners)
        self.closed = False
        self._framer = RequestFramer(service.max_request_size)
        self._seen_request = False  # until then, a TLS handshake is recognised (nereus.wrong_port)
        # Views of the received bytes (no copy); the produced batches in them are copied once, into the stored entry.
        self._requests: deque[memoryview] = deque()
        self._wake = asyncio.Event()
        # (head, future, request bytes) in request order; the bytes count as pending until written.
        self._responses: deque[tuple] = deque()
        self._pending_bytes = 0  # of requests received and not yet answered
        self._dispatching = 0  # bytes of the request being dispatched, until it has a response slot
        self._paused = False
        self._write_blocked = False  # the client is not reading its responses: neither do we read its requests
        self._task: asyncio.Task | None = None
        self._admitted_ip: str | None = None  # counted in service.limits while open
        self._frame_timer = FrameTimer(service.limits, self.protocol_error)
        self._muted_until = 0.0  # clock time until which a quota keeps the connection muted
        self.clock = time.monotonic  # of the mutes (injectable)
        self._budget = service.limits.budget  # the broker's pending bytes over all connections
        self._budget_released = False
        self._flush_soon = False  # a _flush is scheduled for the end of this loop turn

    # -- transport callbacks --------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        ip = self.service.limits.admit_peer(transport)
        if ip is None:
            self.closed = True
            return
        self.service.quotas.refresh_if_stale()
        if not self.service.connection_rates.admit(ip):
            log.info("kafka: closing a connection from %s: over its connection_creation_rate quota", ip)
            self.service.limits.release(ip)
            self.closed = True
            transport.abort()
            return
        waits = self.service.connection_rates.broker_delay()
        if waits > 0:
            self.mute(int(waits * 1000) + 1)
        self._admitted_ip = ip
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)  # above it: pause_writing
        self.peer = peer_address(transport)
        self.peer_cert_cn = peer_cert_cn(transport)
        self.service.connections.add(self)
        self._task = asyncio.ensure_future(self._serve())

    def connection_lost(self, exc) -> None:
        self.closed = True
        self._frame_timer.cancel()
        if self._admitted_ip is None:
            return  # refused at accept: nothing was set up
        self.service.limits.release(self._admitted_ip)
        self._admitted_ip = None
        self._budget.forget(self)
        self._budget_released = True  # what it had pending leaves the broker's total now
        self._budget.remove(self._pending_bytes)
        self.service.connections.discard(self)
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
        for head, fut, _size in self._responses:
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                log.warning("kafka: %s request from %s failed after the connection closed", head.api_key,
                            self.peer, exc_info=fut.exception())
            fut.cancel()
        self._responses.clear()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        framer = self._framer
        if not framer.buffered and not self._seen_request and opens_tls_handshake(data):
            ports = self.service.listener_ports
            tls = [f"{ports[name]} ({name})" for name in ("SSL", "SASL_SSL") if name in ports]
            hint = f"use port {' or '.join(tls)}" if tls else "this broker has no SSL listener (kafkaListeners)"
            report_tls_on_plaintext(f"kafka {self.protocol}", self.peer, hint)
            self.close()
            return
        framer.receive_data(data)
        framer.max_size = self.service.max_request_size
        queued = len(self._requests)
        try:
            while (frame := framer.next_request(allow_short=self._raw_tokens())) is not None:
                self._seen_request = True
                self._requests.append(frame)
                self._pending_bytes += 4 + len(frame)
                self._budget.add(4 + len(frame))
        except FrameSizeError as exc:
            self.protocol_error(str(exc))
            return
        completed = len(self._requests) > queued
        if self._requests:
            self._wake.set()
            if self._budget.over:
                self._budget.wait(self, self._maybe_resume)
            if self._over_limit() and not self._paused:
                self._paused = True
                self._frame_timer.cancel()  # a frame we stopped reading is not the client's delay
                self.transport.pause_reading()
        if not self._paused:
            self._frame_timer.update(bool(framer.buffered), completed)

    @property
    def principal(self) -> str | None:
        """The authenticated role. On a listener without SASL: the CN of the client's verified certificate
        (SSL, as Pulsar's TLS provider), else the broker's ``anonymousUserRole`` (None: none configured,
        Kafka's ``User:ANONYMOUS``)."""
        if self.sasl is None:
            return self.peer_cert_cn or self.service.anonymous_role
        return self.sasl.principal if self.sasl.authenticated else None

    @property
    def authorizer(self):
        """The broker's authorizer of this client's requests (None: authorization disabled)."""
        return self.service.authorizer

    def _raw_tokens(self) -> bool:
        return self.sasl is not None and self.sasl.raw_tokens

    # -- serving ------------------------------------------------------------------------
    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def protocol_error(self, detail: str) -> None:
        log.warning("kafka: closing connection from %s: %s", self.peer, detail)
        self.close()

    def mute(self, ms: int) -> None:
        """Neither read nor serve this client's requests for ``ms`` (a quota's throttle time)."""
        self._muted_until = max(self._muted_until, self.clock() + ms / 1000)
        if not self._paused and not self.closed and self.transport is not None:
            self._paused = True
            self._frame_timer.cancel()
            self.transport.pause_reading()

    async def _serve(self) -> None:
        while not self.closed:
            muted = self._muted_until - self.clock()
            if muted > 0:
                await asyncio.sleep(muted)
                continue
            # Checked on every turn once the mute is over, not only after the sleep: a timer
            # may fire a little early, and the mute may end between that check and this one.
            self._maybe_resume()
            # Requests already read wait while the client does not take its answers, or
            # while MAX_IN_FLIGHT answers are being prepared (a Fetch's may be large).
            if not self._requests or self._write_blocked or self._in_flight_full():
                self._wake.clear()
                await self._wake.wait()
                continue
            frame = self._requests.popleft()
            self._dispatching = 4 + len(frame)
            try:
                await self._dispatch(frame)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("kafka: request from %s failed", self.peer)
                self.close()
                return
            self._unpend(self._dispatching)  # answered by nothing (acks=0, a closing error)
            self._dispatching = 0
            self._maybe_resume()

    def _in_flight_full(self) -> bool:
        """Whether the next request waits for answers in flight. A Produce goes on past MAX_IN_FLIGHT
        (up to MAX_PENDING): its answer is small, its bytes already count as pending, and every
        Produce started joins the next WAL flush, so an unbatched producer's requests share flushes
        instead of waiting for them one group of MAX_IN_FLIGHT at a time."""
        started = len(self._responses)
        if started < MAX_IN_FLIGHT:
            return False
        if started >= MAX_PENDING or self._raw_tokens():
            return True
        frame = self._requests[0]
        return len(frame) < 2 or _API_KEY.unpack_from(frame, 0)[0] != _PRODUCE

    async def _dispatch(self, frame: memoryview) -> None:
        if self._raw_tokens():
            await self._raw_token(bytes(frame))
            return
        head = peek_head(frame)
        if self.sasl is not None and head.api_key not in _BEFORE_AUTHENTICATION:
            if not self.sasl.authenticated or self.sasl.in_exchange:
                self.protocol_error(f"API key {head.api_key} before SASL authentication")
                return
            if self.sasl.expired():
                self.protocol_error(f"SASL session of {self.sasl.principal} expired")
                return
        if not supported(head.api_key, head.api_version):
            if head.api_key == API_VERSIONS:
                # KIP-511: answer in v0 with UNSUPPORTED_VERSION and our ranges.
                self._queue_done(api_versions_response(head))
                return
            self.protocol_error(f"unsupported API key {head.api_key} v{head.api_version}")
            return
        try:
            head, request = decode_request(frame)
        except MalformedRequest as exc:
            self.protocol_error(str(exc))
            return
        timer = RequestTimer(head.api_key)
        started = time.perf_counter()
        try:
            result = self.service.handlers[head.api_key](self, head, request)
            if inspect.isawaitable(result):
                result = await result
        except Exception:
            timer.failed()
            raise
        throttle_ms = await self._request_quota(head, time.perf_counter() - started)
        if result is None:
            timer.done(None)
            return  # no response (Produce with acks=0)
        if throttle_ms:
            result = self._throttled(result, throttle_ms)
        if inspect.isawaitable(result):
            fut = asyncio.ensure_future(result)
            fut.add_done_callback(lambda f: self._finished(timer, f))
            self._responses.append(self._slot(head, fut))
            return
        timer.done(result)
        self._queue_done((head, result))

    async def _request_quota(self, head, seconds: float) -> int:
        """Count a request's handling time against the client's request_percentage; the throttle
        time in ms it causes, for which the connection is muted (0: within it, or none)."""
        if head.api_key in _BEFORE_AUTHENTICATION:
            return 0
        return await self.service.throttles.charge(self, REQUEST, head.client_id, seconds * 1000)

    @staticmethod
    def _throttled(result, ms: int):
        if not inspect.isawaitable(result):
            return with_throttle(result, ms)

        async def later():
            return with_throttle(await result, ms)
        return later()

    async def _raw_token(self, token: bytes) -> None:
        """A v0 SaslHandshake's bare token: answered length-framed, after the responses before it."""
        reply = await raw_token(self, token)
        head = peek_head(b"\0" * 8)  # an ordering slot only: no header is written for raw tokens
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(_RawToken(reply))
        self._responses.append(self._slot(head, fut))
        self._flush()

    def _finished(self, timer: RequestTimer, fut: asyncio.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            timer.failed()
        else:
            timer.done(fut.result())
        # The answers that are ready by the end of this loop turn go out in one write: a WAL
        # flush completes the produce requests of every connection at once.
        if not self._flush_soon:
            self._flush_soon = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _slot(self, head, fut) -> tuple:
        """The response slot of the request being dispatched, carrying its size until written."""
        size, self._dispatching = self._dispatching, 0
        return head, fut, size

    def _unpend(self, size: int) -> None:
        self._pending_bytes -= size
        if not self._budget_released:
            self._budget.remove(size)

    def _over_limit(self) -> bool:
        return (len(self._requests) + len(self._responses) > MAX_PENDING
                or self._pending_bytes > self.service.limits.max_pending_bytes or self._budget.over)

    def pause_writing(self) -> None:
        self._write_blocked = True
        if not self._paused and not self.closed:
            self._paused = True
            self._frame_timer.cancel()
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._wake.set()
        self._maybe_resume()

    def _maybe_resume(self) -> None:
        if self._paused and not self.closed and not self._write_blocked \
                and self.clock() >= self._muted_until and not self._budget.over \
                and len(self._requests) + len(self._responses) < MAX_PENDING // 2 \
                and self._pending_bytes < self.service.limits.max_pending_bytes // 2:
            self._paused = False
            self.transport.resume_reading()

    def _queue_done(self, pair) -> None:
        head, body = pair
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(body)
        self._responses.append(self._slot(head, fut))
        self._flush()

    def _flush(self) -> None:
        """Write the answers ready at the head of the queue, in request order, in one write."""
        self._flush_soon = False
        out: list[bytes | memoryview] = []
        try:
            while self._responses:
                head, fut, size = self._responses[0]
                if not fut.done():
                    return
                self._responses.popleft()
                self._unpend(size)
                self._wake.set()  # a place for the next request
                if fut.cancelled():
                    continue
                exc = fut.exception()  # always retrieved, also once the connection is closed
                if exc is not None:
                    log.error("kafka: %s request from %s failed", head.api_key, self.peer, exc_info=exc)
                    self._write(out)
                    self.close()
                    return
                if self.closed:
                    continue
                body = fut.result()
                if isinstance(body, _RawToken):
                    if body.token is None:
                        self._write(out)
                        self.close()
                        return
                    out.append(_SIZE.pack(len(body.token)) + body.token)
                elif body is not None:
                    out += encode_response_chunks(head, body)
        finally:
            self._write(out)
        self._maybe_resume()

    def _write(self, out: list[bytes | memoryview]) -> None:
        if out and not self.closed:
            self.transport.writelines(out)
            out.clear()


class _RawToken:
    __slots__ = ("token",)

    def __init__(self, token: bytes | None) -> None:
        self.token = token


__all__ = ["KafkaConnection"]
