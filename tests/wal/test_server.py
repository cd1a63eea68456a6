"""A real replica server on a real socket, and its clients."""

import asyncio
import logging
import ssl

import pytest

from nereus.tls import TlsOptions
from nereus.wal import (
    BlockFenced,
    EntryNotFound,
    ReplicaUnavailable,
    WalError,
    WalReplicaClient,
    WalServer,
    WalStore,
)


@pytest.fixture
async def store(tmp_path):
    store = await WalStore.open(tmp_path / "replica", segment_bytes=1 << 20)
    yield store
    await store.close()


@pytest.fixture
async def server(store):
    server = WalServer(store, "127.0.0.1", 0)
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def clients(server):
    made = [WalReplicaClient("127.0.0.1", server.port, timeout=10) for _ in range(2)]
    yield made
    for client in made:
        await client.close()


async def test_two_writers_append_and_read(clients, store):
    first, second = clients
    await asyncio.gather(*(client.append(f"block-{n}", f"wal/{n}-{i}", f"{n}:{i}".encode() * 100)
                           for n, client in enumerate(clients) for i in range(50)))
    assert await first.read("wal/1-7") == b"1:7" * 100
    assert await second.read("wal/0-3", 2, 5) == (b"0:3" * 100)[2:5]
    assert await first.blocks() == ["block-0", "block-1"]
    assert store.holds("wal/0-49")
    await first.append("block-0", "wal/listed", [b"in ", memoryview(b"pieces")])
    assert await second.read("wal/listed") == b"in pieces"
    await first.ping()


async def test_store_errors_come_back_as_themselves(clients):
    first, _ = clients
    with pytest.raises(EntryNotFound):
        await first.read("wal/none")
    await first.append("b", "k", b"one")
    with pytest.raises(WalError, match="other bytes"):
        await first.append("b", "k", b"two")
    with pytest.raises(WalError, match="65535"):
        await first.append("b", "k" * 70_000, b"x")
    await first.ping()  # the connection survived them all


async def test_a_fence_from_one_writer_refuses_the_other(clients):
    old, new = clients
    await old.append("block", "wal/1", b"1")
    await old.append("block", "wal/2", b"2")
    assert await new.fence("block") == ["wal/1", "wal/2"]
    with pytest.raises(BlockFenced):
        await old.append("block", "wal/3", b"3")
    assert await new.read("wal/2") == b"2"
    await new.drop("block")
    assert await new.blocks() == []
    with pytest.raises(EntryNotFound):
        await old.read("wal/2")


async def test_a_closed_server_makes_the_replica_unavailable_until_it_is_back(store):
    server = WalServer(store, "127.0.0.1", 0)
    await server.start()
    port = server.port
    client = WalReplicaClient("127.0.0.1", port, timeout=10)
    await client.append("b", "k1", b"1")
    await server.close()
    with pytest.raises(ReplicaUnavailable):
        await client.append("b", "k2", b"2")
    with pytest.raises(ReplicaUnavailable):  # nobody listens: the reconnection fails too
        await client.ping()
    server = WalServer(store, "127.0.0.1", port)
    await server.start()
    await client.append("b", "k2", b"2")  # reconnected on demand
    assert await client.read("k1") == b"1"
    await client.close()
    await server.close()


async def test_a_replica_that_does_not_answer_times_out_every_pending_request():
    async def silent(reader, writer):
        await reader.read()  # takes requests, never answers

    listener = await asyncio.start_server(silent, "127.0.0.1", 0)
    client = WalReplicaClient("127.0.0.1", listener.sockets[0].getsockname()[1], timeout=0.3)
    results = await asyncio.gather(*(client.append("b", f"k{i}", b"x") for i in range(5)), client.ping(),
                                   return_exceptions=True)
    assert all(isinstance(result, ReplicaUnavailable) for result in results), results
    await client.close()
    listener.close()
    await listener.wait_closed()


async def test_garbage_closes_only_its_own_connection(server, clients, caplog):
    first, _ = clients
    await first.append("b", "k", b"x")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    with caplog.at_level(logging.WARNING, logger="nereus.wal.server"):
        writer.write(b"\x00\x00\x00\x09\x63" + bytes(8))  # op 99
        assert await reader.read() == b""  # closed by the server
    assert "bad frame" in caplog.text and "unknown op 99" in caplog.text
    writer.close()
    assert await first.read("k") == b"x"


async def test_many_pipelined_requests_on_one_connection(server):
    client = WalReplicaClient("127.0.0.1", server.port)
    keys = [f"wal/{i}" for i in range(300)]
    await asyncio.gather(*(client.append("b", key, key.encode() * 50) for key in keys))
    reads = await asyncio.gather(*(client.read(key) for key in keys), client.blocks(), client.ping())
    assert reads[:300] == [key.encode() * 50 for key in keys]
    assert reads[300] == ["b"]
    await client.close()


async def test_over_tls(store, tmp_path):
    from tests.tls.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    server_context = TlsOptions(cert_file=str(pki.server_cert), key_file=str(pki.server_key)).server_context()
    server = WalServer(store, "127.0.0.1", 0, ssl=server_context)
    await server.start()
    client = WalReplicaClient("localhost", server.port, ssl=ssl.create_default_context(cafile=str(pki.ca)))
    await client.append("b", "k", b"secret" * 10_000)
    assert await client.read("k") == b"secret" * 10_000
    await client.close()
    await server.close()


async def test_metrics_show_what_the_replica_holds(server, clients, store):
    from prometheus_client import REGISTRY

    fsyncs = REGISTRY.get_sample_value("nereus_wal_fsync_seconds_count") or 0
    appends = REGISTRY.get_sample_value("nereus_wal_append_seconds_count") or 0
    await clients[0].append("b", "k", b"x")
    assert REGISTRY.get_sample_value("nereus_wal_fsync_seconds_count") > fsyncs
    assert REGISTRY.get_sample_value("nereus_wal_append_seconds_count") == appends + 1
    assert REGISTRY.get_sample_value("nereus_wal_held_entries") >= store.held_entries() == 1
    assert REGISTRY.get_sample_value("nereus_wal_held_blocks") >= 1
    assert REGISTRY.get_sample_value("nereus_wal_held_bytes") >= store.used_bytes() > 0
