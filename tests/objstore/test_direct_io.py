"""Large puts of the file backend go to disk with O_DIRECT: bytes intact at every size, a file
system that refuses O_DIRECT written buffered instead, short and failed writes handled."""

from __future__ import annotations

import errno
import os

import pytest

from nereus.objstore import LocalObjectStore, ObjectStoreError
from nereus import direct_io
from nereus.direct_io import ALIGN, PIECE, WORTH_IT_BYTES, DirectWriter
from nereus.objstore.local import STAGING_DIR
from tests.direct_writes import refuses_direct

SHM = "/dev/shm"


def _chunks(data: bytes, sizes: list[int]) -> list[memoryview]:
    out, pos = [], 0
    for size in sizes:
        out.append(memoryview(data[pos:pos + size]))
        pos += size
    out.append(memoryview(data[pos:]))
    return out


@pytest.mark.parametrize("size", [1, ALIGN - 1, ALIGN, ALIGN + 1, PIECE - 1, PIECE, PIECE + 1, 2 * PIECE + 12_345])
def test_every_size_reads_back_exactly(tmp_path, size) -> None:
    if refuses_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    data = os.urandom(size)
    writer = DirectWriter()
    path = tmp_path / "object"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        # Odd chunk borders, an empty chunk, a chunk across the piece border.
        assert writer.write(fd, _chunks(data, [7, 0, min(size, PIECE - 3) // 2]), size)
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    assert path.stat().st_size == size
    assert path.read_bytes() == data
    assert writer.enabled
    writer.close()


async def test_a_large_put_is_written_direct_and_a_small_one_buffered(tmp_path, monkeypatch) -> None:
    if refuses_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    direct: list[int] = []
    real_write = DirectWriter.write

    def spy(self, fd, chunks, size):
        done = real_write(self, fd, chunks, size)
        direct.append(size if done else -size)
        return done

    monkeypatch.setattr(DirectWriter, "write", spy)
    large, small = os.urandom(3 * PIECE // 2 + 5), os.urandom(WORTH_IT_BYTES - 1)
    async with LocalObjectStore(tmp_path) as store:
        await store.put_if_absent("t/large", [large[:100], large[100:]])
        await store.put_if_absent("t/small", small)
        assert await store.get("t/large") == large
        assert await store.get("t/small") == small
    assert direct == [len(large)]  # the small put never tried it
    assert os.listdir(tmp_path / STAGING_DIR) == []


@pytest.mark.skipif(not os.path.isdir(SHM), reason="no tmpfs at /dev/shm")
async def test_a_file_system_without_o_direct_is_written_buffered(tmp_path) -> None:
    root = os.path.join(SHM, f"nereus-direct-{os.getpid()}-{tmp_path.name}")
    os.makedirs(root)
    try:
        if not refuses_direct(root):
            pytest.skip("this tmpfs takes O_DIRECT")
        data = os.urandom(PIECE + 3)
        async with LocalObjectStore(root) as store:
            await store.put_if_absent("t/o", data)
            await store.put_if_absent("t/p", data)  # the second one no longer tries
            assert not store._direct.enabled
            assert await store.get("t/o") == data
            assert await store.get("t/p") == data
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("short", [3 * ALIGN, ALIGN + 100])
def test_a_short_direct_write_is_finished(tmp_path, monkeypatch, short) -> None:
    """A write that took part of a piece (a disk filling up, say) goes on from where it ended:
    direct after a whole number of blocks, buffered after a part of one."""
    if refuses_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    import fcntl

    real_pwrite = os.pwrite
    calls = []

    def short_once(fd, data, offset):
        calls.append((len(data), offset))
        if len(calls) > 1:
            return real_pwrite(fd, data, offset)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_DIRECT)  # a part of a block needs a buffered write
        try:
            return real_pwrite(fd, data[:short], offset)
        finally:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)

    monkeypatch.setattr(direct_io.os, "pwrite", short_once)
    size = PIECE + ALIGN * 3 + 11
    data = os.urandom(size)
    path = tmp_path / "object"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        assert DirectWriter().write(fd, [memoryview(data)], size)
        os.ftruncate(fd, size)
    finally:
        os.close(fd)
    assert calls[1] == (PIECE - short, short)  # the rest of the first piece, from where the short one ended
    assert path.stat().st_size == size
    assert path.read_bytes() == data


async def test_a_full_disk_fails_the_put_and_publishes_nothing(tmp_path, monkeypatch) -> None:
    if refuses_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")

    def full(fd, data, offset):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(direct_io.os, "pwrite", full)
    async with LocalObjectStore(tmp_path) as store:
        with pytest.raises(ObjectStoreError, match="No space left"):
            await store.put_if_absent("t/o", os.urandom(PIECE))
        assert store._direct.enabled  # a full disk is no reason to stop writing direct
        assert not (tmp_path / "t" / "o").exists()
        monkeypatch.undo()
        await store.put_if_absent("t/o", b"after")
        assert await store.get("t/o") == b"after"


async def test_a_refusal_of_o_direct_turns_it_off_and_the_put_goes_buffered(tmp_path, monkeypatch) -> None:
    """As a file system without O_DIRECT answers (EINVAL when the flag is set)."""
    import fcntl

    real_fcntl = fcntl.fcntl
    tries = []

    def refuse(fd, cmd, arg=0):
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            tries.append(fd)
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_fcntl(fd, cmd, arg)

    monkeypatch.setattr(direct_io.fcntl, "fcntl", refuse)
    data = os.urandom(PIECE + 3)
    async with LocalObjectStore(tmp_path) as store:
        await store.put_if_absent("t/o", data)
        await store.put_if_absent("t/p", data)
        assert not store._direct.enabled
        assert await store.get("t/o") == data
        assert await store.get("t/p") == data
    assert len(tries) == 1  # asked once, then not again


async def test_a_direct_put_is_read_into_the_page_cache_afterwards(tmp_path, monkeypatch) -> None:
    """Readers that come soon (a consumer behind the tail cache) find it cached, as after a buffered
    write; the read-ahead runs after the put, not on its path, and a deleted object is skipped."""
    if refuses_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    from nereus.objstore import local

    advised: list[tuple[int, int, int]] = []
    real_fadvise = os.posix_fadvise
    monkeypatch.setattr(local.os, "posix_fadvise",
                        lambda fd, offset, length, advice: advised.append((offset, length, advice))
                        or real_fadvise(fd, offset, length, advice))
    data = os.urandom(PIECE + 1)
    async with LocalObjectStore(tmp_path) as store:
        await store.put_if_absent("t/large", data)
        await store.put_if_absent("t/small", b"small")
    assert advised == [(0, 0, os.POSIX_FADV_WILLNEED)]  # the large one only, once the store drained
    local._read_ahead(str(tmp_path / "t" / "gone"))  # no error for an object deleted meanwhile
