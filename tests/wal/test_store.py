"""WalStore on real files: durability, group commit, torn tails, fencing, dropping, full disks."""

import asyncio
import errno
import os
import random
import subprocess

import pytest

from nereus.wal import BlockFenced, EntryNotFound, WalCorrupt, WalError, WalFull, WalStore
from nereus.wal import records

SEGMENT = 64 << 10
ENTRY = 20 << 10  # three to a segment


def payload(key: str, size: int = 1000) -> bytes:
    return random.Random(key).randbytes(size)


def segment_files(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".wal"))


async def test_append_read_restart(tmp_path):
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    await store.append("b1", "wal/1", payload("wal/1"))
    await store.append("b1", "wal/2", [b"head-", memoryview(b"and-tail")])
    await store.append("b2", "wal/3", payload("wal/3", 100_000))  # larger than a segment: one of its own
    assert await store.read("wal/1") == payload("wal/1")
    assert await store.read("wal/2") == b"head-and-tail"
    assert await store.read("wal/2", 5, 8) == b"and"
    assert await store.read("wal/2", 5) == b"and-tail"
    assert await store.read("wal/2", 5, 999) == b"and-tail"
    assert store.holds("wal/3") and not store.holds("wal/4")
    with pytest.raises(EntryNotFound):
        await store.read("wal/4")
    await store.close()

    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    assert store.blocks() == ["b1", "b2"]
    assert await store.read("wal/3") == payload("wal/3", 100_000)
    assert await store.read("wal/2") == b"head-and-tail"
    await store.append("b1", "wal/5", b"after the restart")
    await store.close()
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    assert await store.read("wal/5") == b"after the restart"
    assert store.held_entries() == 4
    await store.close()


async def test_one_store_per_directory(tmp_path):
    store = await WalStore.open(tmp_path)
    with pytest.raises(WalError, match="in use"):
        await WalStore.open(tmp_path)
    await store.close()


async def test_concurrent_appends_share_fsyncs(tmp_path):
    store = await WalStore.open(tmp_path)
    keys = [f"wal/{i}" for i in range(200)]
    await asyncio.gather(*(store.append("b", key, payload(key)) for key in keys))
    assert store.fsyncs < len(keys) // 2, f"{store.fsyncs} fsyncs for {len(keys)} concurrent appends"
    assert all(store.holds(key) for key in keys)
    await store.close()


async def test_reappending_the_same_bytes_is_a_no_op(tmp_path):
    store = await WalStore.open(tmp_path)
    await store.append("b", "k", b"bytes")
    fsyncs = store.fsyncs
    await store.append("b", "k", [b"by", b"tes"])
    assert store.fsyncs == fsyncs
    with pytest.raises(WalError, match="other bytes"):
        await store.append("b", "k", b"BYTES")
    with pytest.raises(WalError, match="conflicts"):
        await store.append("other", "k", b"bytes")
    big = payload("big", 200_000)  # its checksum is computed off the event loop
    await store.append("b", "big", big)
    await store.append("b", "big", big)
    # a retry while the first try is still in flight waits for it
    await asyncio.gather(store.append("b", "twice", b"x"), store.append("b", "twice", b"x"))
    await store.close()
    store = await WalStore.open(tmp_path)
    assert await store.read("k") == b"bytes" and await store.read("twice") == b"x"
    await store.close()


def last_record(path) -> records.Record:
    return records.scan(path.read_bytes()).records[-1]


async def appended(directory, count: int) -> tuple[object, list[records.Record]]:
    """Entries k0.. k{count - 1} of block b in a closed store: its one segment and the records in it."""
    store = await WalStore.open(directory)
    for i in range(count):
        await store.append("b", f"k{i}", payload(f"k{i}"))
    await store.close()
    (path,) = [directory / name for name in segment_files(directory)]
    return path, records.scan(path.read_bytes()).records


def overwrite(path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


async def test_torn_tail_is_ignored_and_overwritten(tmp_path):
    path, written = await appended(tmp_path, 10)
    # a crash in the middle of a write: a whole header, part of the data, then nothing
    torn = records.encode_head(records.ENTRY, b"b", b"torn", 1000, records.data_crc([payload("torn")]))
    overwrite(path, written[-1].end, torn + payload("torn")[:300])

    store = await WalStore.open(tmp_path)
    assert [store.holds(f"k{i}") for i in range(10)] == [True] * 10
    assert not store.holds("torn")
    await store.append("b", "k10", payload("k10"))
    await store.close()
    store = await WalStore.open(tmp_path)
    for i in range(11):
        assert await store.read(f"k{i}") == payload(f"k{i}")
    assert not store.holds("torn")
    await store.close()


async def test_a_garbled_last_record_is_a_torn_tail(tmp_path):
    path, written = await appended(tmp_path, 3)
    overwrite(path, written[-1].data_position + 10, b"\xff\xfe")
    store = await WalStore.open(tmp_path)
    assert [store.holds(f"k{i}") for i in range(3)] == [True, True, False]
    await store.append("b", "k2", payload("k2"))  # the writer's retry
    assert await store.read("k2") == payload("k2")
    await store.close()


async def test_corruption_mid_segment_is_reported_not_taken_for_the_end(tmp_path, caplog):
    path, written = await appended(tmp_path, 5)
    overwrite(path, written[2].data_position + 500, b"\x00\x01\x02")
    store = await WalStore.open(tmp_path)
    assert "fails its checksum" in caplog.text
    assert [store.holds(f"k{i}") for i in range(5)] == [True, True, False, True, True]
    with pytest.raises(WalCorrupt):
        await store.read("k2")
    assert await store.fence("b") == ["k0", "k1", "k3", "k4"]
    await store.close()


async def test_a_damaged_header_mid_segment_skips_to_the_next_record(tmp_path, caplog):
    path, written = await appended(tmp_path, 4)
    overwrite(path, written[1].position, b"XXXX")
    store = await WalStore.open(tmp_path)
    assert "hold no valid record" in caplog.text
    assert [store.holds(f"k{i}") for i in range(4)] == [True, False, True, True]
    await store.close()


async def test_a_bad_read_is_caught_by_the_checksum(tmp_path):
    store = await WalStore.open(tmp_path)
    await store.append("b", "k", payload("k"))
    (path,) = [tmp_path / name for name in segment_files(tmp_path)]
    overwrite(path, last_record(path).data_position, b"rot")  # rot after the store checked it on open
    assert await store.read("k", 10, 20) == payload("k")[10:20]  # a part is not checked
    with pytest.raises(WalCorrupt):
        await store.read("k")
    assert not store.holds("k")
    await store.close()


async def test_fence_is_durable_and_refuses_appends(tmp_path):
    store = await WalStore.open(tmp_path)
    await store.append("b", "k1", b"1")
    await store.append("b", "k0", b"0")
    await store.append("other", "x", b"x")
    assert await store.fence("b") == ["k0", "k1"]
    assert await store.fence("b") == ["k0", "k1"]
    assert await store.fence("never-seen") == []
    for block, key in (("b", "k2"), ("b", "k1"), ("never-seen", "y")):
        with pytest.raises(BlockFenced):
            await store.append(block, key, b"late")
    await store.close()

    store = await WalStore.open(tmp_path)
    assert store.blocks() == ["b", "never-seen", "other"]
    with pytest.raises(BlockFenced):
        await store.append("b", "k2", b"2")
    with pytest.raises(BlockFenced):
        await store.append("never-seen", "y", b"y")
    assert await store.fence("b") == ["k0", "k1"]
    assert await store.read("k1") == b"1"
    await store.append("other", "x2", b"x2")
    await store.close()


async def test_an_append_racing_a_fence(tmp_path):
    store = await WalStore.open(tmp_path)
    rng = random.Random(7)

    async def append(i: int):
        for _ in range(rng.randrange(4)):
            await asyncio.sleep(0)  # interleave with the fence at random
        await store.append("b", f"k{i:03d}", payload(f"k{i}", 5000))
        return f"k{i:03d}"

    appends = [asyncio.ensure_future(append(i)) for i in range(200)]
    for _ in range(2):
        await asyncio.sleep(0)
    fenced = await store.fence("b")
    after = await asyncio.gather(*(store.append("b", f"late{i}", b"x") for i in range(5)), return_exceptions=True)
    assert all(isinstance(result, BlockFenced) for result in after)
    results = await asyncio.gather(*appends, return_exceptions=True)
    succeeded = sorted(r for r in results if isinstance(r, str))
    assert all(isinstance(r, (str, BlockFenced)) for r in results)
    assert succeeded == fenced, "the fence must return exactly the appends that succeeded"
    assert 0 < len(succeeded) < 200
    await store.close()
    store = await WalStore.open(tmp_path)
    assert await store.fence("b") == fenced
    await store.close()


async def test_drop_deletes_segments_and_keeps_what_still_matters(tmp_path):
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)

    async def put(block, key):
        await store.append(block, key, payload(key, ENTRY))

    await put("A", "a1")
    await put("A", "a2")
    await put("B", "b1")  # segment 1: a1 a2 b1
    await put("A", "a3")
    await store.fence("C")  # its FENCE lands in segment 2, with nothing of C's to keep it
    await put("A", "a4")
    await put("A", "a5")  # segment 2: a3 FENCE(C) a4 a5
    await put("D", "d1")  # segment 3
    assert segment_files(tmp_path) == [f"{n:016d}.wal" for n in (1, 2, 3)]

    await store.drop("A")  # segment 2 goes (C's fence written again), segment 1 stays for b1
    assert segment_files(tmp_path) == [f"{n:016d}.wal" for n in (1, 3)]
    assert store.used_bytes() == 2 * SEGMENT
    assert not store.holds("a1") and store.holds("b1")
    with pytest.raises(EntryNotFound):
        await store.read("a4")
    with pytest.raises(BlockFenced):
        await put("A", "a6")

    await put("D", "d2")
    await put("D", "d3")
    await put("D", "d4")  # segment 4: segment 3 holds d1, DROP(A), FENCE(C), d2, d3
    await store.drop("D")  # segment 3 goes: DROP(A) must outlive it, a1 a2 are still in segment 1
    assert segment_files(tmp_path) == [f"{n:016d}.wal" for n in (1, 4)]
    await store.close()

    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    assert store.blocks() == ["B", "C"]
    assert not store.holds("a1") and not store.holds("d1") and store.holds("b1")
    with pytest.raises(BlockFenced):
        await put("C", "c1")
    await store.drop("B")  # segment 1 holds nothing live now; segment 4 is being written
    assert segment_files(tmp_path) == [f"{4:016d}.wal"]
    await store.close()
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    assert store.blocks() == ["C"]
    await store.close()


async def test_full_at_the_size_limit_until_a_drop(tmp_path):
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT, max_bytes=2 * SEGMENT)
    for i in range(6):
        await store.append("A", f"a{i}", payload(f"a{i}", ENTRY))
    with pytest.raises(WalFull, match=str(tmp_path)):
        await store.append("B", "b0", payload("b0", ENTRY))
    assert store.used_bytes() == 2 * SEGMENT
    await store.fence("A")  # the fence and the drop still get through, to free space
    await store.drop("A")
    await store.append("B", "b0", payload("b0", ENTRY))
    assert store.used_bytes() <= 2 * SEGMENT
    await store.close()


async def test_full_when_preallocation_finds_no_space(tmp_path, monkeypatch):
    def no_space(fd, offset, length):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", no_space)
    store = await WalStore.open(tmp_path)
    with pytest.raises(WalFull, match=f"no space left in WAL directory {tmp_path}"):
        await store.append("b", "k", b"x")
    assert segment_files(tmp_path) == []
    monkeypatch.undo()
    await store.append("b", "k", b"x")
    assert await store.read("k") == b"x"
    await store.close()


@pytest.fixture
def small_tmpfs(tmp_path):
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                                           capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", str(mount)], check=True)


async def test_full_on_a_full_disk(small_tmpfs):
    store = await WalStore.open(small_tmpfs, segment_bytes=4 << 20)
    with pytest.raises(WalFull, match=str(small_tmpfs)):
        await store.append("b", "k", b"x")
    await store.close()
    store = await WalStore.open(small_tmpfs, segment_bytes=256 << 10)
    await store.append("b", "k", b"x")
    assert await store.read("k") == b"x"
    await store.close()


async def test_a_failed_fsync_stops_the_store_until_reopened(tmp_path, monkeypatch):
    store = await WalStore.open(tmp_path)
    await store.append("b", "k0", b"0")

    def failing(fd):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(WalError, match="reopen"):
        await store.append("b", "k1", b"1")
    monkeypatch.undo()
    with pytest.raises(WalError, match="reopen"):
        await store.append("b", "k2", b"2")
    await store.close()
    store = await WalStore.open(tmp_path)
    assert await store.read("k0") == b"0"
    await store.close()
