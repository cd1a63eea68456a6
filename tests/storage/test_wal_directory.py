"""Readers that run no broker (Spark tasks, the compaction worker): they find WAL replicas from the
address records in the metadata plane and read what is not uploaded yet from them over the
replica protocol, or wait for the upload when they cannot (no credentials, no replica answering)."""

from __future__ import annotations

import asyncio

import pytest

from nereus.storage import StreamStorage
from nereus.storage.cache import BlockCache, TailCache
from nereus.storage.reader import StreamReader
from nereus.storage.wal_directory import RecordedWalDirectory, record_address
from nereus.storage.wal_locator import WalLocator
from nereus.storage.wal_replicas import Durability, WalUnavailable
from nereus.wal import WalServer, WalStore
from tests.storage.conftest import FAST, _LocalReplicas

TOKEN = b"broker-token"


def _superuser(token: bytes) -> tuple[str, float | None]:
    if token != TOKEN:
        raise PermissionError("not a broker's token")
    return "broker", None


@pytest.fixture
async def served(tmp_path, meta):
    """Three WAL replicas on disk, each served on a socket that takes only TOKEN, and their
    address records; yields the stores by replica id."""
    stores, servers = {}, []
    for i in range(3):
        replica = f"r{i}"
        stores[replica] = await WalStore.open(tmp_path / f"wal-{i}", segment_bytes=1 << 20)
        server = WalServer(stores[replica], "127.0.0.1", 0, authenticate=_superuser)
        await server.start()
        servers.append(server)
        await record_address(meta, replica, f"127.0.0.1:{server.port}", tls=False)
    yield stores
    for server in servers:
        await server.close()
    for store in stores.values():
        await store.close()


@pytest.fixture
async def written(meta, objects, served):
    """A stream of 30 entries acknowledged on the replicas while the object store takes no upload."""
    objects.fail_puts(lambda key: "~" in key)
    writer = StreamStorage(meta, objects, node_id="node-w", options=FAST, directory=_LocalReplicas(served),
                           durability=Durability("replicated", 3, 3, 2))
    stream = await writer.open_stream("unuploaded", create=True)
    for i in range(30):
        await stream.append(b"e%d" % i, 1)
    assert writer.writer.uploader.held_bytes > 0
    yield writer
    objects.clear_faults()
    await writer.close()


async def _read_all(reader: StreamReader, stream_id: int) -> list[bytes]:
    return [bytes(e.data) for e in await reader.read(stream_id, 0, 30, 1 << 20)]


async def _stream_id(meta) -> int:
    from nereus.storage import records

    return records.decode((await meta.get(records.name_key("unuploaded"))).value)["id"]


async def test_a_reader_with_the_token_reads_unuploaded_entries_from_the_recorded_replicas(meta, objects, written):
    directory = RecordedWalDirectory(meta, token=lambda: TOKEN)
    reader = StreamReader(meta, objects, TailCache(1), BlockCache(1 << 20), WalLocator(meta, directory))
    try:
        assert await _read_all(reader, await _stream_id(meta)) == [b"e%d" % i for i in range(30)]
    finally:
        await directory.close()


async def test_a_reader_refused_by_the_replicas_waits_for_the_upload(meta, objects, written):
    directory = RecordedWalDirectory(meta)  # no token: every replica refuses it
    stream_id = await _stream_id(meta)
    refused = StreamReader(meta, objects, TailCache(1), BlockCache(1), WalLocator(meta, directory))
    waiting = StreamReader(meta, objects, TailCache(1), BlockCache(1), WalLocator(meta, directory), upload_wait=60)
    try:
        with pytest.raises(WalUnavailable, match="needs a broker's token"):
            await _read_all(refused, stream_id)
        read = asyncio.ensure_future(_read_all(waiting, stream_id))
        await asyncio.sleep(0.3)
        assert not read.done()  # nothing uploaded: it waits
        objects.clear_faults()  # the writer's uploads land now
        assert await asyncio.wait_for(read, 30) == [b"e%d" % i for i in range(30)]
    finally:
        await directory.close()


async def test_the_upload_wait_ends_with_the_reason(meta, objects, written):
    reader = StreamReader(meta, objects, TailCache(1), BlockCache(1), upload_wait=0.2)  # no directory at all
    with pytest.raises(WalUnavailable, match="cannot reach them.*not uploaded within 0.2 s"):
        await _read_all(reader, await _stream_id(meta))


async def test_a_replica_served_over_tls_is_skipped_without_a_client_certificate(meta):
    await record_address(meta, "rt", "127.0.0.1:1", tls=True)
    directory = RecordedWalDirectory(meta)
    await directory.prepare(["rt", "unknown"])
    assert directory.replica("rt") is None and directory.replica("unknown") is None
    await directory.close()


async def test_an_address_record_follows_a_restarted_replica(meta):
    clock = [0.0]
    await record_address(meta, "r", "127.0.0.1:1000", tls=False)
    directory = RecordedWalDirectory(meta, clock=lambda: clock[0])
    try:
        await directory.prepare(["r"])
        assert directory.replica("r").port == 1000
        await record_address(meta, "r", "127.0.0.1:2000", tls=False)
        await directory.prepare(["r"])
        assert directory.replica("r").port == 1000  # read again only once the record may be stale
        clock[0] += 60
        await directory.prepare(["r"])
        assert directory.replica("r").port == 2000
    finally:
        await directory.close()


async def test_an_object_seen_uploaded_is_read_from_the_store_without_a_marker_lookup(meta, objects, written):
    objects.clear_faults()
    writer = written.writer
    await writer.uploader.drain()
    await writer.blocks.close_all()  # the block is done: its marker goes
    await writer.flush()
    stream_id = await _stream_id(meta)
    reader = StreamReader(meta, objects, TailCache(1), BlockCache(1))
    scans = 0
    scan = meta.range_scan

    def counting(*args, **kwargs):
        nonlocal scans
        scans += 1
        return scan(*args, **kwargs)

    meta.range_scan = counting
    try:
        expected = [b"e%d" % i for i in range(30)]
        assert await _read_all(reader, stream_id) == expected
        first = scans
        assert await _read_all(reader, stream_id) == expected  # block cache of one byte: read again
        assert scans - first < first  # the index scans again, the markers are not looked up again
    finally:
        del meta.range_scan
