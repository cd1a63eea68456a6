"""A replica that needs a broker's token: nothing but PING is served before an AUTH it accepts;
refused credentials fail the client's requests with WalUnauthorized, and nothing is stored."""

import asyncio

import pytest

from nereus.wal import WalReplicaClient, WalServer, WalStore, WalUnauthorized


def _check(token: bytes) -> str:
    if token != b"broker-token":
        raise PermissionError(f"token {token[:6]!r}... is not a broker's")
    return "broker"


@pytest.fixture
async def store(tmp_path):  # a small store: these tests write a few bytes
    opened = await WalStore.open(tmp_path / "replica", segment_bytes=1 << 20)
    yield opened
    await opened.close()


@pytest.fixture
async def server(store):
    server = WalServer(store, "127.0.0.1", 0, authenticate=_check)
    await server.start()
    yield server
    await server.close()


async def _client(server, token: bytes | None) -> WalReplicaClient:
    return WalReplicaClient("127.0.0.1", server.port, timeout=10, token=None if token is None else lambda: token)


async def test_without_a_token_only_ping_is_served(server, store):
    client = await _client(server, None)
    try:
        await client.ping()
        for call in (client.append("b", "wal/1", b"x"), client.read("wal/1"), client.fence("b"), client.drop("b"),
                     client.blocks()):
            with pytest.raises(WalUnauthorized, match="needs a broker's token"):
                await call
        assert store.blocks() == [] and not store.holds("wal/1")
    finally:
        await client.close()


async def test_a_refused_token_fails_every_request_with_the_reason(server, store):
    client = await _client(server, b"someone-else")
    try:
        with pytest.raises(WalUnauthorized, match="refused this broker's credentials.*not a broker's"):
            await client.append("b", "wal/1", b"x")
        with pytest.raises(WalUnauthorized):
            await client.ping()  # each new connection tries again, and is refused again
        assert not store.holds("wal/1")
    finally:
        await client.close()


async def test_requests_pipelined_behind_the_auth_are_served(server, store):
    client = await _client(server, b"broker-token")
    try:
        await asyncio.gather(*(client.append("b", f"wal/{i}", b"%d" % i) for i in range(50)))
        assert [await client.read(f"wal/{i}") for i in range(50)] == [b"%d" % i for i in range(50)]
        assert await client.blocks() == ["b"]
        assert sorted(await client.fence("b")) == sorted(f"wal/{i}" for i in range(50))
    finally:
        await client.close()


async def test_a_replica_without_authentication_accepts_a_token_it_does_not_need(store):
    server = WalServer(store, "127.0.0.1", 0)
    await server.start()
    client = await _client(server, b"anything")
    try:
        await client.append("b", "wal/1", b"x")
        assert await client.read("wal/1") == b"x"
    finally:
        await client.close()
        await server.close()
