"""`nereus oxia` guards its port as the standalone guards its Oxia port: connections per IP and
slow frames, while metadata clients are served through the guard."""

from __future__ import annotations

import asyncio

import pytest

from nereus.meta import connect
from tests.cli.processes import Server
from tests.ports import free_port

from .test_connection_limits import PARTIAL, _closed_by_server, _connect, _oxia_answers, _wait_until

LIMIT = 2


@pytest.fixture(scope="module")
def oxia(tmp_path_factory):
    directory = tmp_path_factory.mktemp("oxia-limits")
    port = free_port()
    server = Server(["oxia", "--data-dir", str(directory / "meta"), "--port", str(port),
                     "--max-connections-per-ip", str(LIMIT), "--frame-read-timeout", "1"], directory / "oxia.log")
    server.port = port
    try:
        server.wait_port(port)
        yield server
    finally:
        assert server.stop() == 0, server.text()[-3000:]


def _admitted(port: int):
    holder = []

    def connect_one() -> bool:  # a closed connection may still be counted for a moment
        sock = _connect(port)
        if _oxia_answers(sock):
            holder.append(sock)
            return True
        sock.close()
        return False
    _wait_until(connect_one)
    return holder[0]


def test_a_metadata_client_is_served_through_the_guard(oxia):
    async def round_trip():
        store = connect(f"oxia://127.0.0.1:{oxia.port}")
        try:
            await store.put("/guarded/key", b"value")
            return (await store.get("/guarded/key")).value
        finally:
            await store.close()

    assert asyncio.run(round_trip()) == b"value"


def test_one_connection_over_the_per_ip_limit_is_refused(oxia):
    socks = [_admitted(oxia.port) for _ in range(LIMIT)]
    extra = _connect(oxia.port)
    assert _closed_by_server(extra)
    extra.close()
    assert all(_oxia_answers(s, connect=False) for s in socks)  # the admitted ones keep working
    for s in socks:
        s.close()
    _admitted(oxia.port).close()  # their places are free again
    assert "maxConnectionsPerIp" in oxia.text()


def test_a_stalled_partial_frame_is_closed(oxia):
    normal, slow = _admitted(oxia.port), _admitted(oxia.port)
    slow.sendall(PARTIAL["oxia"])  # and then nothing
    assert _closed_by_server(slow)
    slow.close()
    assert _oxia_answers(normal, connect=False)
    normal.close()
    assert "after its first bytes" in oxia.text()
