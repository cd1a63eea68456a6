"""One client connection: bytes -> codec -> command handlers, and back.

Commands whose order matters against later ones (SEND, FLOW, ACK, REDELIVER) are
handled synchronously as frames arrive; request/response commands run as tasks
and answer with the client's request id. A protocol violation (undecodable or
oversized frame, unknown command, anything before CONNECT) closes the connection,
as a Pulsar broker does; other connections and stored data are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ...codec.pulsar import FrameDecoder, PulsarCodecError, encode_command, encode_entry_command, pb, type_name, wrap
from ...codec.pulsar.frames import FRAME_HEADROOM
from . import authn, consumers, lookup, metrics, producers, transactions
from .errors import ProtocolViolation
from ...net_limits import WRITE_BUFFER_HIGH, FrameTimer, peer_address
from ...tls import peer_cert_cn
from ...wrong_port import opens_tls_handshake, report_tls_on_plaintext

#: Queued MESSAGE frames are written at once when they reach this size.
_ENTRY_FLUSH_BYTES = 256 * 1024
#: How long a connection closed after its last answer (``close_after_answer``) waits for the client's end.
CLOSE_LINGER_SECONDS = 2.0

log = logging.getLogger(__name__)

SERVER_VERSION = "Pulsar Server 4.0.0 (nereus)"
MAX_PROTOCOL_VERSION = 21


class ServerConnection(asyncio.Protocol):
    def __init__(self, service, *, listener: str | None = None) -> None:
        self.service = service
        self.listener = listener  # the advertised listener whose port the client connected to (None: the main port)
        self.decoder = FrameDecoder(service.max_message_size + FRAME_HEADROOM)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.peer_cert_cn: str | None = None  # the verified client certificate's CN (TLS listeners)
        self.protocol_version = 0
        self.connected = False
        self.closed = False
        self.producers: dict[int, producers.Producer] = {}
        # Producers the broker closed (topic unloaded): their late SENDs are dropped, not fatal.
        self.closed_producers: set[int] = set()
        self.consumers: dict[int, consumers.Consumer] = {}
        self._out: list = []  # MESSAGE frames queued for one write (send_entry)
        self._out_bytes = 0
        self.pending_sends = 0
        self.pending_send_bytes = 0
        self._paused = False
        self._write_blocked = False  # the client is not reading what we send: neither do we read it
        self._rate_timer: asyncio.TimerHandle | None = None  # paused by a publish rate until it fires
        self._admitted_ip: str | None = None  # counted in service.limits while open
        self._frame_timer = FrameTimer(service.limits, lambda detail: self.protocol_error("slow-frame", detail))
        self._tasks: set[asyncio.Task] = set()
        self._last_received = time.monotonic()
        self._keepalive: asyncio.TimerHandle | None = None
        # Authentication (authn.py): the role proven at CONNECT, for authorization.
        self.role: str | None = None
        self.identity = None
        self.supports_auth_refresh = False
        self.auth_refresh_pending = False
        self.auth_timer: asyncio.TimerHandle | None = None
        self.auth_refusal: str | None = None  # CONNECT failed: the first request gets this (authn.refuse_request)

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        ip = self.service.limits.admit_peer(transport)
        if ip is None:
            self.closed = True
            return
        self._admitted_ip = ip
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)  # above it: pause_writing
        self.peer = peer_address(transport)
        self.peer_cert_cn = peer_cert_cn(transport)
        self.service.connections.add(self)
        metrics.CONNECTIONS.inc()
        self._arm_keepalive()

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._last_received = time.monotonic()
        if not self.connected and self.decoder.buffered == 0 and opens_tls_handshake(data):
            self._refuse_tls_handshake()
            return
        completed = False
        try:
            self.decoder.receive_data(data)
            while not self.closed and (frame := self.decoder.next_frame()) is not None:
                completed = True
                self._handle(frame)
            if not self.closed and not self._paused:
                self._frame_timer.update(self.decoder.buffered > 0, completed)
        except PulsarCodecError as exc:
            self.protocol_error(type(exc).__name__, str(exc))
        except ProtocolViolation as exc:
            self.protocol_error("violation", str(exc))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._frame_timer.cancel()
        if self._rate_timer is not None:
            self._rate_timer.cancel()
            self._rate_timer = None
        if self._admitted_ip is None:
            return  # refused at accept: nothing was set up
        self.service.limits.release(self._admitted_ip)
        self.service.limits.budget.forget(self)
        self._admitted_ip = None
        self.service.connections.discard(self)
        if self._keepalive is not None:
            self._keepalive.cancel()
        if self.auth_timer is not None:
            self.auth_timer.cancel()
        for producer in list(self.producers.values()):
            producer.detach()
        self.producers.clear()
        for consumer in list(self.consumers.values()):
            self.spawn(consumer.detach())
        self.consumers.clear()

    # -- writing ------------------------------------------------------------------------------
    def send(self, command: pb.BaseCommand) -> None:
        if not self.closed and self.transport is not None:
            self._flush_entries()
            self.transport.write(encode_command(command))

    def send_many(self, commands: list) -> None:
        """Several commands in one write (receipts drained together)."""
        if not self.closed and self.transport is not None:
            self._flush_entries()
            self.transport.write(b"".join([encode_command(c) for c in commands]))

    def send_entry(self, command: pb.BaseCommand, entry: memoryview) -> None:
        """Queue a MESSAGE frame: the frames a dispatch round sends go out in one write at
        the end of the loop's turn (or on the next other command, keeping the order), not a
        system call each; a reader of a compacted view gets thousands of small entries."""
        if self.closed or self.transport is None:
            return
        parts = encode_entry_command(command, entry)
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush_entries)
        self._out.extend(parts)
        self._out_bytes += sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in parts)
        if self._out_bytes >= _ENTRY_FLUSH_BYTES:
            self._flush_entries()

    def _flush_entries(self) -> None:
        if self._out:
            out, self._out, self._out_bytes = self._out, [], 0
            if not self.closed and self.transport is not None:
                self.transport.writelines(out)

    def send_error(self, request_id: int, error: int, message: str) -> None:
        self.send(wrap(pb.CommandError(request_id=request_id, error=error, message=message)))

    def send_success(self, request_id: int) -> None:
        self.send(wrap(pb.CommandSuccess(request_id=request_id)))

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush_entries()
            self.closed = True
            self.transport.close()

    def close_after_answer(self, linger: float = CLOSE_LINGER_SECONDS) -> None:
        """Close once the answers written so far can reach the client: half-close, discard what it
        still sends, close at its end of stream or after ``linger`` seconds. A plain close with the
        client's next request unread makes the kernel reset the connection, and a reset can discard
        the answer before the client reads it."""
        if self.transport is None or self.closed:
            return
        if not self.transport.can_write_eof():  # TLS: no half-close
            self.close()
            return
        self._flush_entries()
        self.closed = True  # data_received discards from now on
        self.transport.write_eof()
        asyncio.get_running_loop().call_later(linger, self.transport.close)

    def _refuse_tls_handshake(self) -> None:
        tls_port = self.service.tls_port
        hint = (f"use port {tls_port} (pulsar+ssl://)" if tls_port is not None
                else "this broker has no TLS listener (brokerServicePortTls)")
        report_tls_on_plaintext("pulsar", self.peer, hint)
        self.close()

    def protocol_error(self, reason: str, detail: str) -> None:
        log.warning("closing connection from %s: %s (%s)", self.peer, detail, reason)
        metrics.PROTOCOL_ERRORS.labels(reason).inc()
        self.close()

    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("handler failed on connection from %s", self.peer, exc_info=task.exception())

    # -- flow control of SENDs ----------------------------------------------------------------
    # The socket is not read while too many SENDs (or bytes of them) wait for storage,
    # and read again below half of both limits, as Pulsar does with its pending count.
    def send_started(self, size: int = 0) -> None:
        self.pending_sends += 1
        self.pending_send_bytes += size
        limits = self.service.limits
        limits.budget.add(size)
        if limits.budget.over:
            limits.budget.wait(self, self._maybe_resume)
        if (self.pending_sends >= limits.max_pending_publish_requests
                or self.pending_send_bytes >= limits.max_pending_bytes or limits.budget.over) \
                and not self._paused and self.transport is not None:
            self._paused = True
            self._frame_timer.cancel()  # a frame we stopped reading is not the client's delay
            self.transport.pause_reading()

    def send_finished(self, size: int = 0) -> None:
        self.pending_sends -= 1
        self.pending_send_bytes -= size
        self.service.limits.budget.remove(size)
        self._maybe_resume()

    def pause_writing(self) -> None:
        self._write_blocked = True
        if not self._paused and not self.closed and self.transport is not None:
            self._paused = True
            self._frame_timer.cancel()
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_blocked = False
        self._maybe_resume()

    def throttle_reads(self, delay: float) -> bool:
        """Stop reading for ``delay`` seconds (a publish rate was exceeded); False if already so."""
        if self.closed or self.transport is None or self._rate_timer is not None:
            return False
        self._rate_timer = asyncio.get_running_loop().call_later(delay, self._rate_elapsed)
        if not self._paused:
            self._paused = True
            self._frame_timer.cancel()
            self.transport.pause_reading()
        return True

    def _rate_elapsed(self) -> None:
        self._rate_timer = None
        self._maybe_resume()

    def _maybe_resume(self) -> None:
        limits = self.service.limits
        if self._paused and not self.closed and not self._write_blocked and self._rate_timer is None \
                and not limits.budget.over \
                and self.pending_sends < limits.max_pending_publish_requests // 2 \
                and self.pending_send_bytes < limits.max_pending_bytes // 2:
            self._paused = False
            self.transport.resume_reading()

    # -- keep-alive ---------------------------------------------------------------------------
    def _arm_keepalive(self) -> None:
        self._keepalive = asyncio.get_running_loop().call_later(self.service.keepalive, self._check_alive)

    def _check_alive(self) -> None:
        if self.closed:
            return
        if time.monotonic() - self._last_received > 2 * self.service.keepalive:
            self.protocol_error("keepalive", "no data nor PONG within two keep-alive intervals")
            return
        if self.connected:
            self.send(wrap(pb.CommandPing()))
        self._arm_keepalive()

    # -- command routing ------------------------------------------------------------------------
    def _handle(self, frame) -> None:
        name = type_name(frame.type)
        if not self.connected:
            if name != "CONNECT":
                raise ProtocolViolation(f"{name} before CONNECT")
            self._connect(frame.body)
            return
        if self.auth_refusal is not None and name not in ("PING", "PONG"):
            authn.refuse_request(self, frame)
            return
        handler = _SYNC.get(name)
        if handler is not None:
            handler(self, frame)
            return
        handler = _ASYNC.get(name)
        if handler is not None:
            self.spawn(_guarded(handler, self, frame.body))
            return
        if name == "CONNECT":
            raise ProtocolViolation("second CONNECT")
        raise ProtocolViolation(f"unsupported command {name}")

    server_version = SERVER_VERSION

    def _connect(self, cmd: pb.CommandConnect) -> None:
        self.protocol_version = min(cmd.protocol_version, MAX_PROTOCOL_VERSION)
        if not authn.authenticate_connect(self, cmd):
            return
        self.connected = True
        log.debug("connection from %s: %s, protocol v%d", self.peer, cmd.client_version, self.protocol_version)
        self.send(wrap(pb.CommandConnected(
            server_version=SERVER_VERSION, protocol_version=self.protocol_version,
            max_message_size=self.service.max_message_size,
            feature_flags=pb.FeatureFlags(supports_auth_refresh=self.service.authenticator is not None,
                                          supports_broker_entry_metadata=False, supports_partial_producer=True,
                                          supports_topic_watchers=False),
        )))


async def _guarded(handler, conn: ServerConnection, cmd) -> None:
    """Run a request handler; an unexpected failure becomes an ERROR for that request."""
    try:
        await handler(conn, cmd)
    except Exception as exc:
        log.exception("%s failed for %s", type(cmd).__name__, conn.peer)
        if "request_id" in cmd.DESCRIPTOR.fields_by_name:
            conn.send_error(cmd.request_id, pb.UnknownError, f"{type(exc).__name__}: {exc}")


def _ping(conn: ServerConnection, _frame) -> None:
    conn.send(wrap(pb.CommandPong()))


def _pong(_conn: ServerConnection, _frame) -> None:
    pass  # data_received already noted that the client is alive


_SYNC = {
    "PING": _ping,
    "PONG": _pong,
    "AUTH_RESPONSE": authn.handle_auth_response,
    "SEND": producers.handle_send,
    "FLOW": consumers.handle_flow,
    "ACK": consumers.handle_ack,
    "REDELIVER_UNACKNOWLEDGED_MESSAGES": consumers.handle_redeliver,
}
_ASYNC = {
    "LOOKUP": lookup.handle_lookup,
    "PARTITIONED_METADATA": lookup.handle_partitioned_metadata,
    "GET_TOPICS_OF_NAMESPACE": lookup.handle_get_topics,
    "PRODUCER": producers.handle_producer,
    "CLOSE_PRODUCER": producers.handle_close_producer,
    "SUBSCRIBE": consumers.handle_subscribe,
    "CLOSE_CONSUMER": consumers.handle_close_consumer,
    "UNSUBSCRIBE": consumers.handle_unsubscribe,
    "SEEK": consumers.handle_seek,
    "GET_LAST_MESSAGE_ID": consumers.handle_get_last_message_id,
    "CONSUMER_STATS": consumers.handle_consumer_stats,
    "GET_SCHEMA": lookup.handle_get_schema,
    "GET_OR_CREATE_SCHEMA": lookup.handle_get_or_create_schema,
    "TC_CLIENT_CONNECT_REQUEST": transactions.handle_tc_connect,
    "NEW_TXN": transactions.handle_new_txn,
    "ADD_PARTITION_TO_TXN": transactions.handle_add_partition,
    "ADD_SUBSCRIPTION_TO_TXN": transactions.handle_add_subscription,
    "END_TXN": transactions.handle_end_txn,
    "END_TXN_ON_PARTITION": transactions.handle_end_on_partition,
    "END_TXN_ON_SUBSCRIPTION": transactions.handle_end_on_subscription,
}

__all__ = ["ServerConnection"]
