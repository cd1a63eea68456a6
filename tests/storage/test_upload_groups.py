"""Grouped uploads of WAL replica objects (``wal_groups``): one object per block in the store,
members read there, the group deleted with its last member, and the writers that die or
stall at each step of a group's upload (in-memory replicas; end to end in tests/broker)."""

from __future__ import annotations

import asyncio
import time

import pytest

from nereus.objstore import ObjectNotFound
from nereus.storage import GarbageCollector, StorageOptions, StreamStorage, WalOptions, records, wal_groups
from nereus.storage.collector import TOMBSTONE
from nereus.storage.wal_locator import find_block
from tests.storage.test_replicated_wal import REPLICATED, Directory, MemoryReplica, until

FAST = StorageOptions(wal=WalOptions(flush_interval=0.002))


class Crash(Exception):
    pass


@pytest.fixture
def replicas():
    return {name: MemoryReplica() for name in ("r1", "r2", "r3")}


def writer_storage(meta, objects, replicas, node: str, options: StorageOptions = FAST) -> StreamStorage:
    return StreamStorage(meta, objects, node_id=node, options=options, directory=Directory(replicas, "r1"),
                         durability=REPLICATED)


async def read_all(storage: StreamStorage, name: str) -> list[bytes]:
    handle = await storage.open_stream(name)
    await handle.refresh()
    out, offset = [], 0
    while offset < handle.next_offset():
        result = await handle.fetch(offset)
        out += [bytes(e.data) for e in result.entries]
        offset = result.entries[-1].end_offset
    return out


async def read_elsewhere(meta, objects, name: str, replicas: dict | None = None) -> list[bytes]:
    """Read as a process with no memory of the writer's uploads does (reaching ``replicas``, if given)."""
    reader = StreamStorage(meta, objects, node_id="node-reader", options=FAST,
                           directory=Directory(replicas) if replicas is not None else None)
    try:
        return await read_all(reader, name)
    finally:
        await reader.close()


def wal_objects(objects) -> set[str]:
    return {k for k in objects.inner._bucket.objects if k.startswith("wal/")}


def collector(meta, objects, replicas, grace_seconds: float = 0) -> GarbageCollector:
    """A collector that takes every pending block as a dead writer's (and by default deletes freed
    objects at once)."""
    return GarbageCollector(meta, objects, pending_timeout_seconds=0, grace_seconds=grace_seconds,
                            clock=lambda: time.time() + 3600, directory=Directory(replicas))


async def write_two_streams(storage: StreamStorage) -> tuple[list[bytes], list[bytes]]:
    a = await storage.open_stream("a", create=True)
    b = await storage.open_stream("b", create=True)
    sent_a, sent_b = [], []
    for i in range(12):
        sent_a.append(b"a%d" % i)
        sent_b.append(b"b%d" % i)
        await asyncio.gather(a.append(sent_a[-1], 1), b.append(sent_b[-1], 1))
    return sent_a, sent_b


async def test_a_blocks_objects_go_up_as_one_object_read_there_once_the_replicas_forgot_them(meta, objects,
                                                                                             replicas):
    storage = writer_storage(meta, objects, replicas, "node-g")
    try:
        sent_a, sent_b = await write_two_streams(storage)
        writer = storage.writer
        members = sorted(replicas["r1"].entries)
        assert len(members) >= 12  # a flush each round at least
        block = writer.blocks.current
        writer.blocks.close(block)
        await writer.uploader.drain()
        group = wal_groups.group_name(writer.blocks.prefix, block.first)
        assert wal_objects(objects) == {group}  # one PUT for the block, not one per flush
        await until(lambda: not any(r.entries for r in replicas.values()))
        assert await find_block(meta, members[0]) is None
        for r in replicas.values():
            r.down = True  # only the store is left
        assert await read_elsewhere(meta, objects, "a") == sent_a
        assert await read_elsewhere(meta, objects, "b") == sent_b
    finally:
        await storage.close()


async def test_a_quiet_writers_group_goes_up_once_it_is_upload_group_seconds_old(meta, objects, replicas):
    options = StorageOptions(wal=WalOptions(flush_interval=0.002, upload_group_seconds=0.2))
    storage = writer_storage(meta, objects, replicas, "node-q", options)
    try:
        stream = await storage.open_stream("quiet", create=True)
        await stream.append(b"only", 1)  # and nothing after it
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not wal_objects(objects):
            assert loop.time() < deadline, "the quiet writer's group was never uploaded"
            await asyncio.sleep(0.02)
        assert storage.writer.blocks.current.closed
        assert await read_elsewhere(meta, objects, "quiet") == [b"only"]
    finally:
        await storage.close()


async def test_the_group_is_deleted_with_its_last_member_and_not_before(meta, objects, replicas):
    storage = writer_storage(meta, objects, replicas, "node-d")
    try:
        sent_a, sent_b = await write_two_streams(storage)
        block = storage.writer.blocks.current
        storage.writer.blocks.close(block)
        await storage.writer.uploader.drain()
        await until(lambda: not replicas["r1"].entries)
        group = wal_groups.group_name(storage.writer.blocks.prefix, block.first)
        gc = collector(meta, objects, replicas)
        await storage.delete_stream("a")  # every slice of a released: the members only a had are freed
        await gc.collect()
        await gc.collect()
        assert wal_objects(objects) == {group}  # b's members are alive in it
        assert await read_elsewhere(meta, objects, "b") == sent_b
        await storage.delete_stream("b")
        await gc.collect()
        await gc.collect()
        assert not wal_objects(objects)
        assert await meta.get(records.object_key(group)) is None
    finally:
        await storage.close()


async def test_a_writer_that_dies_before_its_group_lands_leaves_the_block_to_the_collector(meta, objects, replicas):
    attempts = []
    objects.fail_puts(lambda key: key.endswith(".group") and (attempts.append(key) or True))
    storage = writer_storage(meta, objects, replicas, "node-x")
    sent_a, sent_b = await write_two_streams(storage)
    block = storage.writer.blocks.current
    storage.writer.blocks.close(block)
    await until(lambda: attempts)
    await storage.writer.uploader.close()  # killed while its group upload retried
    objects.clear_faults()
    assert (await collector(meta, objects, replicas, grace_seconds=7200).collect()).resolved >= 1
    group = wal_groups.group_name(storage.writer.blocks.prefix, block.first)
    assert await objects.get(group) == TOMBSTONE  # claimed: a late put of the group fails
    gc = collector(meta, objects, replicas)
    for r in replicas.values():
        r.down = True
    assert await read_elsewhere(meta, objects, "a") == sent_a  # each member uploaded on its own
    assert await read_elsewhere(meta, objects, "b") == sent_b
    for r in replicas.values():
        r.down = False
    await gc.collect()
    assert group not in wal_objects(objects)  # the claimed name, freed, is deleted
    await storage.close()


@pytest.mark.parametrize("step", ["put-landed", "sealed"])
async def test_a_writer_that_dies_after_its_group_landed_loses_nothing(meta, objects, replicas, monkeypatch, step):
    """Killed after the group's put (``put-landed``) or after its record too (``sealed``), before
    the block's marker went: the collector uploads the members on their own; an unsealed group is
    deleted, a sealed one stays for as long as a member lives."""
    real_seal = wal_groups.seal
    attempts = []

    async def dies(*args, **kwargs):
        attempts.append(args)
        if step == "sealed":
            await real_seal(*args, **kwargs)
        raise Crash("killed")

    monkeypatch.setattr(wal_groups, "seal", dies)
    storage = writer_storage(meta, objects, replicas, f"node-{step}")
    sent_a, sent_b = await write_two_streams(storage)
    block = storage.writer.blocks.current
    group = wal_groups.group_name(storage.writer.blocks.prefix, block.first)
    storage.writer.blocks.close(block)
    await until(lambda: attempts)
    await storage.writer.uploader.close()
    monkeypatch.setattr(wal_groups, "seal", real_seal)
    gc = collector(meta, objects, replicas)
    assert (await gc.collect()).resolved >= 1
    await gc.collect()
    assert (group in wal_objects(objects)) == (step == "sealed")
    for r in replicas.values():
        r.down = True
    assert await read_elsewhere(meta, objects, "a") == sent_a
    assert await read_elsewhere(meta, objects, "b") == sent_b
    for r in replicas.values():
        r.down = False
    for name in ("a", "b"):
        await storage.delete_stream(name)
    await gc.collect()
    await gc.collect()
    assert not wal_objects(objects)  # members, their group, all gone with the last reference
    await storage.close()


async def test_a_stalled_writers_group_put_after_the_collector_claimed_the_block_is_refused(meta, objects,
                                                                                           replicas):
    release, stalled_at = asyncio.Event(), asyncio.Event()
    stalled = objects.put_if_absent

    async def stall_groups(key, data):
        if key.endswith(".group") and data != TOMBSTONE:  # (the collector's claim is not the writer's)
            stalled_at.set()
            await release.wait()  # the writer stalls mid-upload (GC pause, SIGSTOP)
        return await stalled(key, data)

    objects.put_if_absent = stall_groups
    storage = writer_storage(meta, objects, replicas, "node-s")
    try:
        sent_a, sent_b = await write_two_streams(storage)
        block = storage.writer.blocks.current
        group = wal_groups.group_name(storage.writer.blocks.prefix, block.first)
        storage.writer.blocks.close(block)
        await asyncio.wait_for(stalled_at.wait(), 10)
        gc = collector(meta, objects, replicas, grace_seconds=7200)
        assert (await gc.collect()).resolved >= 1  # it takes the writer for dead
        release.set()
        await until(lambda: block.claimed)  # the late put met the collector's claim: left to it
        assert await meta.get(records.object_key(group)) is not None
        assert await objects.get(group) == TOMBSTONE
        for r in replicas.values():
            r.down = True
        assert await read_elsewhere(meta, objects, "a") == sent_a
        assert await read_elsewhere(meta, objects, "b") == sent_b
    finally:
        for r in replicas.values():
            r.down = False
        await storage.close()


async def test_a_member_read_before_its_group_is_known_comes_from_the_replicas_then_from_the_group(
        meta, objects, replicas):
    storage = writer_storage(meta, objects, replicas, "node-r")
    try:
        stream = await storage.open_stream("r", create=True)
        await stream.append(b"first", 1)
        assert await read_elsewhere(meta, objects, "r", replicas) == [b"first"]  # from a replica: not uploaded yet
        with pytest.raises(ObjectNotFound):
            await objects.get(sorted(replicas["r1"].entries)[0])
        storage.writer.blocks.close(storage.writer.blocks.current)
        await storage.writer.uploader.drain()
        await until(lambda: not replicas["r1"].entries)
        assert await read_elsewhere(meta, objects, "r") == [b"first"]  # from the group
    finally:
        await storage.close()


async def test_a_block_is_closed_once_its_group_holds_upload_group_bytes(meta, objects, replicas):
    options = StorageOptions(wal=WalOptions(flush_interval=0.002, upload_group_seconds=3600,
                                            upload_group_bytes=2000))
    storage = writer_storage(meta, objects, replicas, "node-b", options)
    try:
        stream = await storage.open_stream("big", create=True)
        sent = [bytes([i]) * 700 for i in range(10)]
        for value in sent:
            await stream.append(value, 1)
        await until(lambda: len(wal_objects(objects)) >= 2)  # groups of ~3 flushes, not one per hour
        storage.writer.blocks.close(storage.writer.blocks.current)
        await storage.writer.uploader.drain()
        await until(lambda: not replicas["r1"].entries)
        assert await read_elsewhere(meta, objects, "big") == sent
    finally:
        await storage.close()
