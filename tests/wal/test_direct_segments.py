"""A replica's segments with large writes made with O_DIRECT: such a write starts at a block
boundary and writes again the part of that block already written (by a direct or a buffered
write), so entries of every size, many to a block, read back intact, across restarts (the
partial block read back from disk) and after a file system's refusal (buffered from then on)."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import random

import pytest

from nereus import direct_io
from nereus.direct_io import ALIGN, WORTH_IT_BYTES, DirectWriter
from nereus.wal import WalStore
from tests.direct_writes import refuses_direct

SEGMENT = 4 << 20


def payload(key: str, size: int) -> bytes:
    return random.Random(key).randbytes(size)


def _check_tail(store: WalStore) -> None:
    """The active segment keeps the written part of its last block, as the file holds it."""
    segment = store._active
    start = segment.end - segment.end % ALIGN
    assert segment.tail == os.pread(segment.fd, segment.end - start, start)


async def _append_many(store: WalStore, prefix: str, sizes: list[int]) -> dict[str, bytes]:
    written = {f"{prefix}/{i}": payload(f"{prefix}/{i}", size) for i, size in enumerate(sizes)}
    # Some together (one group commit, one write), some one by one (a write per entry).
    keys = list(written)
    await asyncio.gather(*(store.append("b1", key, written[key]) for key in keys[: len(keys) // 2]))
    for key in keys[len(keys) // 2:]:
        await store.append("b1", key, written[key])
    return written


async def test_entries_of_every_size_many_to_a_block_read_back_across_restarts(tmp_path, monkeypatch) -> None:
    if refuses_direct(tmp_path):
        pytest.skip("this file system refuses O_DIRECT")
    direct_writes = []
    real_write = DirectWriter.write

    def spy(self, fd, chunks, size, offset=0):
        done = real_write(self, fd, chunks, size, offset)
        direct_writes.append((offset, done))
        return done

    monkeypatch.setattr(DirectWriter, "write", spy)
    big = WORTH_IT_BYTES
    sizes = [1, 7, 100, ALIGN - 30, big + 5, ALIGN + 1, 3, big * 2 + 1, 12, ALIGN * 2 - 1, big, 999, 5]
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    written = await _append_many(store, "a", sizes)
    for key, data in written.items():
        assert await store.read(key) == data
    _check_tail(store)
    await store.close()
    assert len(direct_writes) >= 3 and all(done for _, done in direct_writes)  # the large ones
    assert all(offset % ALIGN == 0 for offset, _ in direct_writes)
    assert any(offset > 0 for offset, _ in direct_writes)  # later writes start inside the segment

    # Reopened: the segment ends inside a block, which the next write must keep.
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    _check_tail(store)
    written |= await _append_many(store, "b", list(reversed(sizes)))
    for key, data in written.items():
        assert await store.read(key) == data
    _check_tail(store)
    await store.close()
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    for key, data in written.items():
        assert await store.read(key) == data
    assert store.held_entries() == len(written)
    await store.close()


async def test_a_file_system_refusing_o_direct_gets_buffered_writes(tmp_path, monkeypatch) -> None:
    real_fcntl = fcntl.fcntl

    def refuse(fd, cmd, arg=0):
        if cmd == fcntl.F_SETFL and arg & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_fcntl(fd, cmd, arg)

    monkeypatch.setattr(direct_io.fcntl, "fcntl", refuse)
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    written = await _append_many(store, "a", [5, ALIGN + 3, 17, WORTH_IT_BYTES * 2])
    assert not store._direct.enabled
    await store.close()
    monkeypatch.undo()  # a restart on a file system that takes it: direct again, after buffered writes
    store = await WalStore.open(tmp_path, segment_bytes=SEGMENT)
    written |= await _append_many(store, "b", [9, ALIGN - 1, 2])
    for key, data in written.items():
        assert await store.read(key) == data
    await store.close()
