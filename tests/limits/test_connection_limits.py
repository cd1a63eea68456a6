"""maxConnectionsPerIp and the slow-frame guard on a real standalone's Pulsar, Kafka, HTTP and Oxia ports."""

from __future__ import annotations

import socket
import struct
import time

import pytest

from nereus.codec.pulsar import encode_command, pb, wrap
from tests.standalone_process import Standalone

LIMIT = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = Standalone(tmp_path_factory.mktemp("limits") / "data",
                      ["--compaction-interval", "0", "--max-connections-per-ip", str(LIMIT),
                       "--frame-read-timeout", "1"])
    proc.start()
    yield proc
    alive = proc.alive()
    code = proc.stop()
    assert alive and code == 0, proc.log.read_text()[-3000:]


def _wait_until(predicate, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=20)


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed by the broker")
        out += chunk
    return out


API_VERSIONS = struct.pack(">hhih", 18, 0, 7, -1)


def _kafka_answers(sock: socket.socket) -> bool:
    """One ApiVersions v0 round trip; False when the broker closed the connection."""
    try:
        sock.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)
        size = struct.unpack(">i", _read(sock, 4))[0]
        return struct.unpack_from(">ih", _read(sock, size), 0) == (7, 0)
    except (ConnectionError, OSError):
        return False


def _pulsar_frame(command) -> bytes:
    return encode_command(wrap(command))


def _pulsar_answers(sock: socket.socket, connect: bool = True) -> bool:
    """CONNECT (or PING) and its CONNECTED (or PONG); False when the broker closed the connection."""
    command = (pb.CommandConnect(client_version="raw", protocol_version=21) if connect else pb.CommandPing())
    try:
        sock.sendall(_pulsar_frame(command))
        size = struct.unpack(">I", _read(sock, 4))[0]
        frame = _read(sock, size)
        base = pb.BaseCommand.FromString(frame[4:4 + struct.unpack_from(">I", frame, 0)[0]])
        return base.type == (pb.BaseCommand.CONNECTED if connect else pb.BaseCommand.PONG)
    except (ConnectionError, OSError):
        return False


HTTP_REQUEST = b"GET /admin/v2/clusters HTTP/1.1\r\nHost: nereus\r\n\r\n"


def _http_answers(sock: socket.socket, connect: bool = True) -> bool:
    """One keep-alive GET and its whole answer; False when the broker closed the connection."""
    try:
        sock.sendall(HTTP_REQUEST)
        head = b""
        while b"\r\n\r\n" not in head:
            head += _read(sock, 1)
        length = next(int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                      if line.startswith(b"content-length:"))
        _read(sock, length)
        return head.startswith(b"HTTP/1.1 200")
    except (ConnectionError, OSError, StopIteration):
        return False


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _h2_frame(kind: int, flags: int = 0, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + b"\0\0\0\0" + payload


def _oxia_answers(sock: socket.socket, connect: bool = True) -> bool:
    """HTTP/2 (gRPC): the preface and SETTINGS (or a PING), until the server's SETTINGS (or PING ack)."""
    try:
        sock.sendall((H2_PREFACE + _h2_frame(4)) if connect else _h2_frame(6, 0, b"12345678"))
        while True:
            header = _read(sock, 9)
            _read(sock, int.from_bytes(header[:3], "big"))
            if (header[3], header[4] & 1) == ((4, 0) if connect else (6, 1)):
                return True
    except (ConnectionError, OSError):
        return False


ANSWERS = {"kafka": _kafka_answers, "pulsar": _pulsar_answers, "http": _http_answers, "oxia": _oxia_answers}
#: A frame (or request header) cut 3 bytes short.
PARTIAL = {"kafka": (struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)[:-3],
           "pulsar": _pulsar_frame(pb.CommandPing())[:-3],
           "http": HTTP_REQUEST[:-3],
           "oxia": _h2_frame(6, 0, b"12345678")[:-3]}


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes the connection (what it still sends first, such as HTTP/2
    acknowledgements, is read past)."""
    sock.settimeout(20)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


@pytest.mark.parametrize("protocol", ["kafka", "pulsar", "http", "oxia"])
def test_one_connection_over_the_per_ip_limit_is_refused(server, protocol):
    port = server.ports[protocol]
    answers = ANSWERS[protocol]
    socks = [_connect(port) for _ in range(LIMIT)]
    assert all(answers(s) for s in socks)
    extra = _connect(port)  # accepted by the kernel, closed by the broker
    assert _closed_by_server(extra)
    extra.close()
    if protocol == "kafka":
        assert all(answers(s) for s in socks)
    else:
        assert all(answers(s, connect=False) for s in socks)  # the admitted ones keep working
    socks.pop().close()

    def one_more_admitted() -> bool:
        sock = _connect(port)
        if answers(sock):
            socks.append(sock)
            return True
        sock.close()
        return False
    _wait_until(one_more_admitted)  # a closed connection frees its place
    for s in socks:
        s.close()
    assert "maxConnectionsPerIp" in server.log.read_text()


@pytest.mark.parametrize("protocol", ["kafka", "pulsar", "http", "oxia"])
def test_a_stalled_partial_frame_is_closed_while_a_normal_client_keeps_working(server, protocol):
    port = server.ports[protocol]
    answers = ANSWERS[protocol]

    def admitted() -> socket.socket:
        holder = []

        def connect() -> bool:  # the previous test's connections may still be counted for a moment
            sock = _connect(port)
            if answers(sock):
                holder.append(sock)
                return True
            sock.close()
            return False
        _wait_until(connect)
        return holder[0]

    normal = admitted()
    slow = admitted()
    slow.sendall(PARTIAL[protocol])  # and then nothing
    assert _closed_by_server(slow)
    slow.close()
    assert answers(normal) if protocol == "kafka" else answers(normal, connect=False)
    normal.close()
    assert "after its first bytes" in server.log.read_text()
