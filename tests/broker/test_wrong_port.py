"""The first bytes of a TLS client on a plaintext listener, and the rate of its log lines."""

from __future__ import annotations

import logging
import ssl

from nereus import wrong_port
from nereus.codec.pulsar import encode_command, pb, wrap


def _client_hello() -> bytes:
    """The first bytes a real TLS client sends (the standard library's, over memory BIOs)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="example.com")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def test_a_client_hello_is_recognised_and_no_frame_is_taken_for_one():
    assert wrong_port.opens_tls_handshake(_client_hello())
    connect = encode_command(wrap(pb.CommandConnect(client_version="x", protocol_version=21)))
    assert not wrong_port.opens_tls_handshake(connect)
    assert not wrong_port.opens_tls_handshake(b"\x00\x00\x00\x16\x00\x12")  # a Kafka request header
    assert not wrong_port.opens_tls_handshake(b"\x16")


def test_one_line_a_minute_per_listener_and_every_connection_counted(caplog):
    now = [1000.0]
    listener = "test-listener"
    before = wrong_port.TLS_ON_PLAINTEXT.labels(listener)._value.get()
    with caplog.at_level(logging.WARNING, logger="nereus.wrong_port"):
        for step in (0, 1, 30, 59.9, 60.1, 61):
            now[0] = 1000.0 + step
            wrong_port.report_tls_on_plaintext(listener, "10.0.0.1:5000", "use port 1", clock=lambda: now[0])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "(3 more since the last such line)" in lines[1]
    assert wrong_port.TLS_ON_PLAINTEXT.labels(listener)._value.get() - before == 6
