"""The storage layer on WAL replicas (one layer: replicas are in-memory stand-ins here;
the replica service itself, on disk and over sockets, is tested in tests/wal and end to
end with real brokers)."""

from __future__ import annotations

import asyncio

import pytest

from nereus.objstore import ObjectNotFound
from nereus.storage import GarbageCollector, StorageError, StorageOptions, StreamStorage, WalOptions, wal_groups
from nereus.storage.wal_locator import find_block
from nereus.storage.wal_replicas import Durability, ReplicaInfo
from nereus.wal.errors import BlockFenced, EntryNotFound, ReplicaUnavailable
from tests.storage.conftest import FAST

REPLICATED = Durability("replicated", 3, 3, 2)


async def until(predicate, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


class MemoryReplica:
    """A WAL replica kept in a dict; ``down`` makes every call fail as a dead broker's would."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[str, bytes]] = {}
        self.fenced: set[str] = set()
        self.down = False
        self.appends = 0

    def _check(self) -> None:
        if self.down:
            raise ReplicaUnavailable("replica down")

    async def append(self, block, key, data):
        self._check()
        if block in self.fenced:
            raise BlockFenced(block)
        await asyncio.sleep(0)
        self.entries[key] = (block, b"".join(bytes(c) for c in data) if isinstance(data, list) else bytes(data))
        self.appends += 1

    async def read(self, key, start=0, end=None):
        self._check()
        if key not in self.entries:
            raise EntryNotFound(key)
        return self.entries[key][1][start:end]

    async def fence(self, block):
        self._check()
        self.fenced.add(block)
        return sorted(k for k, (b, _) in self.entries.items() if b == block)

    async def drop(self, block):
        self._check()
        for key in [k for k, (b, _) in self.entries.items() if b == block]:
            del self.entries[key]

    def blocks(self) -> set[str]:
        return {b for b, _ in self.entries.values()}


class Directory:
    def __init__(self, replicas: dict[str, MemoryReplica], local: str | None = None):
        self.replicas = replicas
        self.local = local

    async def prepare(self, replica_ids):
        pass

    def local_id(self):
        return self.local

    def live(self):
        return [ReplicaInfo(name, zone=f"z{i % 2}") for i, (name, r) in enumerate(sorted(self.replicas.items()))
                if not r.down]

    def replica(self, replica_id):
        return self.replicas.get(replica_id)


@pytest.fixture
def replicas():
    return {name: MemoryReplica() for name in ("r1", "r2", "r3")}


@pytest.fixture
async def replicated(meta, objects, replicas):
    storage = StreamStorage(meta, objects, node_id="node-r", options=FAST, directory=Directory(replicas, "r1"),
                            durability=REPLICATED)
    yield storage
    await storage.close()


async def read_all(storage: StreamStorage, name: str) -> list[bytes]:
    handle = await storage.open_stream(name)
    await handle.refresh()
    result = await handle.fetch(0)
    return [bytes(e.data) for e in result.entries]


async def test_an_append_is_acknowledged_by_the_ack_quorum_then_uploaded_and_dropped(replicated, replicas, meta,
                                                                                    objects):
    replicas["r3"].down = True  # one of three may be down: 2 acks are enough
    stream = await replicated.open_stream("t", create=True)
    assert (await stream.append(b"one", 1)).base_offset == 0
    assert (await stream.append(b"two", 1)).base_offset == 1
    writer = replicated.writer
    assert writer.durability == REPLICATED
    await writer.flush()
    block = writer.blocks.current
    assert set(block.ensemble) == {"r1", "r2"}  # r3 was not live when the block was reserved
    keys = sorted(replicas["r1"].entries)
    assert len(keys) == 2 and all(k.startswith("wal/") and "~3.3.2.g256-" in k for k in keys)
    held = b"".join(replicas["r1"].entries[k][1] for k in keys)
    writer.blocks.close(block)  # (else once it is upload_group_seconds old)
    await writer.uploader.drain()
    # One object in the store for the block, its objects end to end; none under their own names.
    group = wal_groups.group_name(writer.blocks.prefix, block.first)
    assert await objects.get(group) == held
    for key in keys:
        with pytest.raises(ObjectNotFound):
            await objects.get(key)
    await until(lambda: not replicas["r1"].entries and not replicas["r2"].entries)  # dropped once done
    assert await find_block(meta, keys[0]) is None
    assert await read_all(replicated, "t") == [b"one", b"two"]


async def test_without_upload_groups_each_object_is_uploaded_under_its_own_name(meta, objects, replicas):
    options = StorageOptions(wal=WalOptions(flush_interval=0.002, upload_group_seconds=0))
    storage = StreamStorage(meta, objects, node_id="node-u", options=options, directory=Directory(replicas, "r1"),
                            durability=REPLICATED)
    try:
        stream = await storage.open_stream("own", create=True)
        await stream.append(b"one", 1)
        await stream.append(b"two", 1)
        writer = storage.writer
        await writer.flush()
        await writer.uploader.drain()
        keys = sorted(replicas["r1"].entries)
        assert keys and all("~3.3.2-" in k for k in keys)
        for key in keys:  # in the object store under the very name the index uses
            assert await objects.get(key) == replicas["r1"].entries[key][1]
        writer.blocks.close(writer.blocks.current)
        await until(lambda: not replicas["r1"].entries)
        assert await read_all(storage, "own") == [b"one", b"two"]
    finally:
        await storage.close()


async def test_appends_go_on_while_the_object_store_is_down_and_readers_elsewhere_read_the_replicas(
        replicated, replicas, meta, objects):
    objects.fail_puts(lambda key: True)  # the store refuses every put
    stream = await replicated.open_stream("down", create=True)
    for i in range(20):
        await stream.append(b"m%d" % i, 1)
    assert replicated.writer.uploader.held_bytes > 0
    # Another process (no memory of the writer's uploads) reads from the replicas.
    other = StreamStorage(meta, objects, node_id="node-o", options=FAST, directory=Directory(replicas))
    try:
        assert await read_all(other, "down") == [b"m%d" % i for i in range(20)]
    finally:
        await other.close()
    objects.clear_faults()
    await replicated.writer.uploader.drain()
    assert replicated.writer.uploader.held_bytes == 0


async def test_without_an_ack_quorum_the_append_fails_with_a_storage_error(replicated, replicas):
    replicas["r2"].down = replicas["r3"].down = True
    stream = await replicated.open_stream("few", create=True)
    with pytest.raises(StorageError):
        await stream.append(b"x", 1)


async def test_a_replica_failing_mid_block_moves_the_writes_to_a_new_ensemble(replicated, replicas):
    stream = await replicated.open_stream("move", create=True)
    await stream.append(b"a", 1)
    first = replicated.writer.blocks.current
    replicas["r2"].down = True
    await stream.append(b"b", 1)  # r1 + r3 acknowledge; r2's failure closes the block
    await stream.append(b"c", 1)
    second = replicated.writer.blocks.current
    assert second is not first and "r2" not in second.ensemble
    assert await read_all(replicated, "move") == [b"a", b"b", b"c"]


async def test_the_collector_fences_a_dead_writers_block_and_uploads_what_it_acknowledged(meta, objects, replicas):
    objects.fail_puts(lambda key: "~" in key)  # the writer's uploads never land: it "dies" before them
    writer = StreamStorage(meta, objects, node_id="node-dead", options=FAST, directory=Directory(replicas, "r1"),
                           durability=REPLICATED)
    stream = await writer.open_stream("orphan", create=True)
    for i in range(5):
        await stream.append(b"o%d" % i, 1)
    await writer.writer.uploader.close()  # stop retrying: as if killed
    objects.clear_faults()
    directory = Directory(replicas)
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, directory=directory)
    stats = await collector.collect()
    assert stats.resolved >= 1
    # Fenced: the dead writer's block refuses its late writes on every replica.
    block = writer.writer.blocks.current
    assert all(block.marker in r.fenced for r in replicas.values())
    with pytest.raises(BlockFenced):
        await replicas["r1"].append(block.marker, "late", b"x")
    # Everything acknowledged is in the store and readable without any replica.
    for r in replicas.values():
        r.down = True
    reader = StreamStorage(meta, objects, node_id="node-n", options=FAST)
    try:
        assert await read_all(reader, "orphan") == [b"o%d" % i for i in range(5)]
    finally:
        await reader.close()
    for r in replicas.values():
        r.down = False
    # The writer, alive after all, goes on in a block of its own.
    assert (await stream.append(b"late", 1)).base_offset == 5
    assert writer.writer.blocks.current is not block
    await writer.close()


async def test_the_collector_leaves_a_block_whose_replicas_cannot_be_fenced(meta, objects, replicas):
    objects.fail_puts(lambda key: "~" in key)
    writer = StreamStorage(meta, objects, node_id="node-z", options=FAST, directory=Directory(replicas, "r1"),
                           durability=REPLICATED)
    stream = await writer.open_stream("zz", create=True)
    await stream.append(b"z", 1)
    await writer.writer.uploader.close()
    replicas["r1"].down = replicas["r2"].down = True  # W - A + 1 = 2 fences are needed; one is possible
    collector = GarbageCollector(meta, objects, pending_timeout_seconds=0, directory=Directory(replicas))
    assert (await collector.collect()).resolved == 0
    replicas["r1"].down = replicas["r2"].down = False
    objects.clear_faults()
    assert (await collector.collect()).resolved == 1
    reader = StreamStorage(meta, objects, node_id="node-n2", options=FAST)
    try:
        assert await read_all(reader, "zz") == [b"z"]
    finally:
        await reader.close()
    await writer.close()


async def test_a_stream_moves_between_durabilities_in_append_order(meta, objects, replicas):
    storage = StreamStorage(meta, objects, node_id="node-m", options=FAST, directory=Directory(replicas, "r1"))
    try:
        stream = await storage.open_stream("mv", create=True)
        pending = [asyncio.ensure_future(stream.append(b"p%d" % i, 1)) for i in range(10)]
        switched = asyncio.ensure_future(stream.set_durability(REPLICATED))
        pending += [asyncio.ensure_future(stream.append(b"q%d" % i, 1)) for i in range(10)]
        await switched
        offsets = [r.base_offset for r in await asyncio.gather(*pending)]
        assert offsets == list(range(20))
        assert stream.writable
        assert any("~" in k for k in replicas["r1"].entries)
    finally:
        await storage.close()


async def test_an_idle_writers_block_is_done_once_its_life_is_over(meta, objects, replicas):
    """No append comes after the last one: the block still closes when its life is over, so its
    marker goes and the collector may delete what was freed in it."""
    options = StorageOptions(wal=WalOptions(flush_interval=0.002, reservation_ttl=0.2, idle_group_interval=0.05))
    storage = StreamStorage(meta, objects, node_id="node-i", options=options, directory=Directory(replicas, "r1"),
                            durability=REPLICATED)
    try:
        stream = await storage.open_stream("idle", create=True)
        await stream.append(b"only", 1)
        key = next(iter(replicas["r1"].entries))
        assert await find_block(meta, key) is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while await find_block(meta, key) is not None:
            assert loop.time() < deadline, "the idle writer's block never finished"
            await asyncio.sleep(0.05)
        await until(lambda: not replicas["r1"].entries)  # and its replicas forgot it
    finally:
        await storage.close()
