"""A replica that needs a broker's token: nothing but PING is served before an AUTH it accepts;
refused credentials fail the client's requests with WalUnauthorized, and nothing is stored. A
token that expires stops being accepted on the connection it proved: the client proves it
again with its current token (a rotated token file's) and its request goes through."""

import asyncio

import pytest

from nereus.wal import WalReplicaClient, WalServer, WalStore, WalUnauthorized


def _check(token: bytes) -> tuple[str, float | None]:
    if token != b"broker-token":
        raise PermissionError(f"token {token[:6]!r}... is not a broker's")
    return "broker", None


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


class _Tokens:
    """Tokens that expire ``lifetime`` seconds after the replica's clock issued them (``b"t<n>"``)."""

    def __init__(self, lifetime: float) -> None:
        self.now = 1000.0
        self.lifetime = lifetime
        self.issued: dict[bytes, float] = {}
        self.current = self.issue()

    def issue(self) -> bytes:
        token = b"t%d" % len(self.issued)
        self.issued[token] = self.now
        self.current = token
        return token

    def check(self, token: bytes) -> tuple[str, float]:
        if token not in self.issued:
            raise PermissionError("not a broker's token")
        expires_at = self.issued[token] + self.lifetime
        if expires_at <= self.now:
            raise PermissionError("the token has expired")
        return "broker", expires_at


async def test_an_expired_token_is_proved_again_with_the_current_one_and_the_request_goes_through(store):
    tokens = _Tokens(lifetime=60)
    server = WalServer(store, "127.0.0.1", 0, authenticate=tokens.check, clock=lambda: tokens.now)
    await server.start()
    shown = []

    def current() -> bytes:  # as a token file re-read for each AUTH
        shown.append(tokens.current)
        return tokens.current

    client = WalReplicaClient("127.0.0.1", server.port, timeout=10, token=current)
    try:
        await client.append("b", "wal/1", b"one")
        tokens.now += 61  # t0 expired; the operator rotated the file to t1
        tokens.issue()
        await client.append("b", "wal/2", b"two")  # refused once, proved again with t1, sent again
        assert shown == [b"t0", b"t1"]
        assert await client.read("wal/2") == b"two" and store.holds("wal/2")
        tokens.now += 61  # t1 expired and nobody rotated it: refused, nothing stored
        with pytest.raises(WalUnauthorized, match="has expired"):
            await client.append("b", "wal/3", b"three")
        assert not store.holds("wal/3")
    finally:
        await client.close()
        await server.close()


async def test_requests_on_a_connection_whose_token_expired_are_not_executed(store):
    tokens = _Tokens(lifetime=60)
    server = WalServer(store, "127.0.0.1", 0, authenticate=tokens.check, clock=lambda: tokens.now)
    await server.start()
    client = WalReplicaClient("127.0.0.1", server.port, timeout=10, token=lambda: b"t0")  # never rotated
    try:
        await client.append("b", "wal/1", b"x")
        tokens.now += 61
        # The first is answered UNAUTHORIZED unexecuted, and t0 refused when shown again; the others
        # meet a new connection whose AUTH is refused.
        for call in (client.append("b", "wal/2", b"y"), client.read("wal/1"), client.fence("b"), client.drop("b")):
            with pytest.raises(WalUnauthorized, match="has expired"):
                await call
        assert store.blocks() == ["b"] and store.holds("wal/1") and not store.holds("wal/2")
    finally:
        await client.close()
        await server.close()
