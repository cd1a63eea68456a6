"""File backend specifics: durability protocol, crash leftovers, loop never blocked."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from nereus.objstore import (
    InvalidObjectKey,
    LocalObjectStore,
    ObjectNotFound,
    ObjectStoreError,
    open_object_store,
)
from nereus.objstore.local import STAGING_DIR


def staged(root) -> list[str]:
    return sorted(os.listdir(os.path.join(root, STAGING_DIR)))


async def test_durable_and_complete_after_put(tmp_path) -> None:
    data = os.urandom(1 << 20)
    async with LocalObjectStore(tmp_path) as writer:
        await writer.put_if_absent("topic/p0/seg-1", [data[:1000], data[1000:]])
    assert (tmp_path / "topic/p0/seg-1").read_bytes() == data
    assert staged(tmp_path) == []  # the temp name is gone once published
    async with open_object_store(str(tmp_path)) as reader:
        assert await reader.get("topic/p0/seg-1") == data


async def test_put_fsyncs_file_and_every_new_directory(tmp_path, monkeypatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    async with LocalObjectStore(tmp_path / "root") as st:
        await st.open()
        monkeypatch.setattr(os, "fsync", spy)
        await st.put_if_absent("a/b/c", b"payload")
        root = str(tmp_path / "root")
        # The data is synced in its temp file (anonymous, or named in the staging directory).
        temp = [p for p in synced if p.startswith(os.path.join(root, STAGING_DIR) + "/")]
        assert len(temp) == 1 and synced.index(temp[0]) < synced.index(f"{root}/a/b")
        # New directories are made durable in their parents, and the object in its directory.
        assert {root, f"{root}/a", f"{root}/a/b"} <= set(synced)
        assert synced[-1] == f"{root}/a/b"
        synced.clear()
        await st.put_if_absent("a/b/d", b"payload")  # directories already durable
        assert synced[-1] == f"{root}/a/b" and f"{root}/a" not in synced


CRASHING_WRITER = textwrap.dedent(
    """
    import asyncio, os, sys
    from nereus.objstore.local import LocalObjectStore, _SpareFiles

    if sys.argv[2] == "named":  # as on a file system without anonymous temp files
        _SpareFiles._anonymous_files_work = lambda self: False
    # Die between "temp file written and fsynced" and "published by link".
    real_link = os.link
    os.link = lambda src, dst, **k: os._exit(17) if dst == "obj" else real_link(src, dst, **k)

    async def main():
        await LocalObjectStore(sys.argv[1]).put_if_absent("victim/obj", b"x" * 100_000)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("temp_files", ["anonymous", "named"])
async def test_crashed_write_is_invisible_and_cleaned_up(tmp_path, temp_files) -> None:
    proc = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(tmp_path), temp_files], timeout=60)
    assert proc.returncode == 17
    leftovers = staged(tmp_path)
    if temp_files == "anonymous":
        assert leftovers == []  # an anonymous file dies with its process
    else:
        assert len(leftovers) == 1 and leftovers[0].startswith(".tmp-")
    async with LocalObjectStore(tmp_path) as st:
        with pytest.raises(ObjectNotFound):
            await st.head("victim/obj")
        for name in leftovers:
            with pytest.raises(InvalidObjectKey):
                await st.get(f"{STAGING_DIR}/{name}")
        assert staged(tmp_path) == []  # removed when the store opened
        await st.put_if_absent("victim/obj", b"retry")  # the name was never taken
        assert await st.get("victim/obj") == b"retry"


async def test_cleanup_spares_fresh_temp_of_live_writer(tmp_path) -> None:
    async with LocalObjectStore(tmp_path, temp_max_age=3600) as st:
        await st.open()
        live = tmp_path / STAGING_DIR / f".tmp-{os.getpid()}-inflight"
        old = tmp_path / STAGING_DIR / f".tmp-{os.getpid()}-ancient"
        junk = tmp_path / STAGING_DIR / ".tmp-notapid"
        for p in (live, old, junk):
            p.write_bytes(b"partial")
        past = time.time() - 7200
        os.utime(old, (past, past))
        assert await st.cleanup_temp() == 2
        assert staged(tmp_path) == [live.name]


async def test_temp_left_after_publish_is_removed_object_kept(tmp_path) -> None:
    # A crash between link and unlink leaves the temp name as a second hard link.
    async with LocalObjectStore(tmp_path) as st:
        await st.put_if_absent("obj", b"complete")
    os.link(tmp_path / "obj", tmp_path / STAGING_DIR / ".tmp-999999999-leftover")
    async with LocalObjectStore(tmp_path) as st:
        assert await st.get("obj") == b"complete"
        assert staged(tmp_path) == []


async def test_object_and_prefix_cannot_share_a_name(tmp_path) -> None:
    async with LocalObjectStore(tmp_path) as st:
        await st.put_if_absent("a", b"1")
        with pytest.raises(InvalidObjectKey):
            await st.put_if_absent("a/b", b"2")
        await st.put_if_absent("p/q", b"3")
        with pytest.raises(InvalidObjectKey):
            await st.put_if_absent("p", b"4")
        with pytest.raises(ObjectNotFound):
            await st.head("p")
        with pytest.raises(ObjectNotFound):
            await st.get("p")
        with pytest.raises(ObjectNotFound):
            await st.get("a/b")
        assert await st.delete("p") is False
        assert await st.get("p/q") == b"3"


async def test_short_writes_and_many_chunks(tmp_path, monkeypatch) -> None:
    real_writev = os.writev

    def stingy_writev(fd, buffers):  # the kernel may accept only part of a writev
        return real_writev(fd, [bytes(memoryview(buffers[0])[:3])])

    chunks = [bytes([i % 251]) * (i % 7) for i in range(3000)]  # more chunks than IOV_MAX
    async with LocalObjectStore(tmp_path) as st:
        await st.put_if_absent("many", chunks)
        monkeypatch.setattr(os, "writev", stingy_writev)
        await st.put_if_absent("stingy", [b"hello ", memoryview(b"wide world"), b"!"])
        assert await st.get("many") == b"".join(chunks)
        assert await st.get("stingy") == b"hello wide world!"


async def test_file_io_never_runs_on_the_event_loop(tmp_path, monkeypatch) -> None:
    loop_thread = threading.get_ident()
    on_loop: list[str] = []
    for name in ("open", "fsync", "writev", "pread", "link", "unlink", "stat", "mkdir", "scandir"):
        real = getattr(os, name)

        def watch(*a, _real=real, _name=name, **k):
            if threading.get_ident() == loop_thread:
                on_loop.append(_name)
            return _real(*a, **k)

        monkeypatch.setattr(os, name, watch)
    async with open_object_store((tmp_path / "fresh").as_uri()) as st:
        await st.put_if_absent("x/y", [b"a", b"b"])
        await st.get("x/y", 1)
        await st.head("x/y")
        await st.delete("x/y")
        await st.cleanup_temp()
    assert on_loop == []


async def test_os_errors_become_store_errors(tmp_path) -> None:
    (tmp_path / "not-a-dir").write_bytes(b"")
    async with LocalObjectStore(tmp_path / "not-a-dir") as st:
        with pytest.raises(ObjectStoreError) as err:
            await st.put_if_absent("k", b"v")
    assert isinstance(err.value.__cause__, OSError)


async def test_puts_take_temp_files_opened_ahead(tmp_path, monkeypatch) -> None:
    """Creating an inode waits on the journal: a put uses a file opened before it started."""
    from nereus.objstore.local import _SpareFiles
    from tests.waiting import wait_until

    async with LocalObjectStore(tmp_path) as st:
        await st.put_if_absent("first", b"1")
        if not st._spares._anonymous:
            pytest.skip("this file system has no anonymous temp files")
        wait_until(lambda: len(st._spares._files) == _SpareFiles.SPARE, "the spare files", 10)  # a pool thread fills it

        def no_create(self):
            raise OSError("no inode may be created on a put's path")

        monkeypatch.setattr(_SpareFiles, "_create", no_create)
        for i in range(_SpareFiles.SPARE):
            await st.put_if_absent(f"obj-{i}", b"x" * i)
        assert [await st.get(f"obj-{i}") for i in range(_SpareFiles.SPARE)] == [b"x" * i for i in range(_SpareFiles.SPARE)]
        assert staged(tmp_path) == []
