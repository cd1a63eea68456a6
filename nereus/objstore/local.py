"""Durable object store on a local directory (``file://``).

Publishing protocol of ``put_if_absent``: write the data to a temp file, fsync it,
link it to the final name (``link`` never replaces an existing name, which gives
put-if-absent without a lock), fsync the object's directory. The temp file is an
anonymous one (``O_TMPFILE``) where the file system has them, else a file in
``<root>/.tmp-staging/`` unlinked after the link. A crash before the link leaves no
object: an anonymous file vanishes, a named temp file is one keys can never name (the
``.tmp-`` prefix is reserved) and ``cleanup_temp`` removes; a crash after it leaves a
complete object.

Temp files are created ahead of the puts that use them (``_SpareFiles``): creating an
inode waits for the file system's journal, which fsyncs keep busy (on ext4, half a
millisecond and more), and that wait belongs on no put's path. Large puts are written
with ``O_DIRECT`` where the file system takes it (``direct_io``).

Limitation: unlike S3, a key cannot be both an object and a prefix of other keys
(``a`` and ``a/b``), since ``a`` would have to be a file and a directory.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from nereus.objstore._common import (
    TEMP_PREFIX,
    Payload,
    as_chunks,
    check_range,
    clip_range,
    validate_key,
)
from nereus.direct_io import ALIGN, WORTH_IT_BYTES, DirectWriter
from nereus.objstore.api import ObjectInfo, ObjectStore
from nereus.objstore.errors import InvalidObjectKey, ObjectExists, ObjectNotFound, ObjectStoreError

T = TypeVar("T")

STAGING_DIR = TEMP_PREFIX + "staging"
try:
    _IOV_MAX = max(os.sysconf("SC_IOV_MAX"), 16)  # writev refuses longer buffer lists
except (AttributeError, ValueError, OSError):
    _IOV_MAX = 1024


class LocalObjectStore(ObjectStore):
    """Objects are files under ``root``; all I/O runs on a private thread pool.

    The directory is created, and stale temp files removed, on first use (or by
    ``await open()``). ``temp_max_age`` (seconds) bounds how long a temp file whose
    writer process still seems alive is kept.
    """

    def __init__(self, root: str | os.PathLike[str], *, io_threads: int = 8, temp_max_age: float = 3600.0) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self._staging = os.path.join(self.root, STAGING_DIR)
        self._temp_max_age = temp_max_age
        self._executor = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="nereus-objstore")
        self._open_lock = threading.Lock()
        self._opened = False
        self._closed = False
        # Directories whose entry is known durable; saves re-fsyncing parents on every put.
        self._durable_dirs: set[str] = set()
        self._spares = _SpareFiles(self._staging)
        self._direct = DirectWriter()

    def __repr__(self) -> str:
        return f"LocalObjectStore({self.root!r})"

    # -- plumbing -----------------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        if self._closed:
            raise ObjectStoreError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._in_thread, fn, args)

    def _in_thread(self, fn: Callable[..., T], args: tuple) -> T:
        try:
            if not self._opened:
                self._open_sync()
            return fn(*args)
        except OSError as exc:
            # Disk full, I/O error, permissions...: callers handle ObjectStoreError only.
            raise ObjectStoreError(f"{self!r}: {exc}") from exc

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *validate_key(key).split("/"))

    def _open_sync(self) -> None:
        with self._open_lock:
            if self._opened:
                return
            missing = []  # the root and any ancestors about to be created
            path = self.root
            while not os.path.isdir(path) and os.path.dirname(path) != path:
                missing.append(path)
                path = os.path.dirname(path)
            os.makedirs(self._staging, exist_ok=True)
            # New directories must be durable in their parents before objects land in them.
            for created in reversed(missing):
                _fsync_dir(os.path.dirname(created))
            _fsync_dir(self.root)
            self._durable_dirs.add(self.root)
            self._cleanup_temp_sync()
            self._opened = True

    async def open(self) -> None:
        """Create the directory and remove stale temp files now rather than on first use."""
        await self._run(lambda: None)

    # -- temp files ---------------------------------------------------------------

    async def cleanup_temp(self) -> int:
        """Remove temp files of crashed writers; returns how many were removed."""
        return await self._run(self._cleanup_temp_sync)

    def _cleanup_temp_sync(self) -> int:
        removed = 0
        now = time.time()
        with os.scandir(self._staging) as entries:
            for entry in entries:
                if not entry.name.startswith(TEMP_PREFIX):
                    continue
                try:
                    age = now - entry.stat(follow_symlinks=False).st_mtime
                except FileNotFoundError:
                    continue
                if _writer_alive(entry.name) and age < self._temp_max_age:
                    continue  # probably a put in flight (this or another process)
                try:
                    os.unlink(entry.path)
                    removed += 1
                except FileNotFoundError:
                    pass
        return removed

    # -- operations ---------------------------------------------------------------

    async def put_if_absent(self, key: str, data: Payload) -> None:
        path = self._path(key)
        chunks = as_chunks(data)
        try:
            if await self._run(self._put_sync, key, path, chunks) and not self._closed:
                # Written past the page cache: read it into the cache in the background, off the put's
                # path, for the readers that come soon (a consumer behind the tail cache, compaction).
                self._executor.submit(_read_ahead, path)
        finally:
            if self._spares.wanted() and not self._closed:
                self._executor.submit(self._spares.refill)

    def _put_sync(self, key: str, path: str, chunks: list[memoryview]) -> bool:
        """Publish the object; whether it was written with O_DIRECT."""
        directory = os.path.dirname(path)
        self._ensure_dir(key, directory)
        fd, tmp = self._spares.take()
        direct = False
        try:
            size = sum(c.nbytes for c in chunks)
            if size >= WORTH_IT_BYTES and self._direct.write(fd, chunks, size):
                if size % ALIGN:
                    os.ftruncate(fd, size)  # the last block's padding
                direct = True
            else:
                _write_all(fd, chunks)
            os.fsync(fd)
            dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                try:
                    _SpareFiles.link(fd, tmp, dir_fd, os.path.basename(path))
                except FileExistsError:
                    if os.path.isdir(path):
                        raise InvalidObjectKey(
                            f"{key!r} is a prefix of other keys, which the file backend cannot also store as an object"
                        ) from None
                    raise ObjectExists(key) from None
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        finally:
            _SpareFiles.discard(fd, tmp)
        return direct

    def _ensure_dir(self, key: str, directory: str) -> None:
        """Create ``directory`` and make every entry on the way from the root durable."""
        if directory in self._durable_dirs:
            return
        rel = os.path.relpath(directory, self.root).split(os.sep)
        current = self.root
        for part in rel:
            parent, current = current, os.path.join(current, part)
            if current in self._durable_dirs:
                continue
            try:
                os.mkdir(current, 0o755)
            except FileExistsError:
                if not os.path.isdir(current):
                    raise InvalidObjectKey(
                        f"{key!r} lies under an existing object, which the file backend cannot store"
                    ) from None
            # fsync even if another writer created it: its fsync may not have happened yet.
            _fsync_dir(parent)
            self._durable_dirs.add(current)

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        check_range(start, end)
        return await self._run(self._get_sync, key, self._path(key), start, end)

    def _get_sync(self, key: str, path: str, start: int, end: int | None) -> bytes:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ObjectNotFound(key)
            lo, hi = clip_range(start, end, st.st_size)
            return _pread_all(fd, hi - lo, lo)
        finally:
            os.close(fd)

    async def head(self, key: str) -> ObjectInfo:
        return await self._run(self._head_sync, key, self._path(key))

    def _head_sync(self, key: str, path: str) -> ObjectInfo:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(key) from None
        if not stat.S_ISREG(st.st_mode):
            raise ObjectNotFound(key)
        return ObjectInfo(key, st.st_size)

    async def delete(self, key: str) -> bool:
        return await self._run(self._delete_sync, self._path(key))

    def _delete_sync(self, path: str) -> bool:
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return False  # a directory standing for a key prefix, not an object
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        # Without this a deleted object could reappear after a crash.
        _fsync_dir(os.path.dirname(path))
        return True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # shutdown(wait=True) blocks until queued I/O finishes: keep it off the loop.
        await asyncio.to_thread(self._executor.shutdown, True)
        self._spares.close()
        self._direct.close()


class _SpareFiles:
    """Anonymous temp files (``O_TMPFILE``) opened ahead of the puts that fill them (thread-safe).

    Where the file system or ``/proc`` (through which an anonymous file gets its name)
    lacks them, each put creates a named temp file in the staging directory instead
    (checked once).
    """

    SPARE = 8  # about the puts one process has in flight at once

    def __init__(self, staging: str) -> None:
        self._staging = staging
        self._lock = threading.Lock()
        self._files: list[int] = []
        self._anonymous: bool | None = None  # decided on first use
        self._closed = False

    def wanted(self) -> bool:
        return bool(self._anonymous) and len(self._files) < self.SPARE // 2

    def take(self) -> tuple[int, str | None]:
        """An open empty file: (fd, its temp path, or None if anonymous)."""
        with self._lock:
            if self._files:
                return self._files.pop(), None
        if self._anonymous is None:
            self._anonymous = self._anonymous_files_work()
        if self._anonymous:
            return self._create(), None
        tmp = os.path.join(self._staging, f"{TEMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}")
        return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), tmp

    def refill(self) -> None:
        while len(self._files) < self.SPARE and not self._closed:
            fd = self._create()
            with self._lock:
                if self._closed:
                    os.close(fd)
                    return
                self._files.append(fd)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            files, self._files = self._files, []
        for fd in files:
            os.close(fd)

    def _create(self) -> int:
        return os.open(self._staging, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o644)

    def _anonymous_files_work(self) -> bool:
        if not hasattr(os, "O_TMPFILE"):
            return False
        try:
            fd = self._create()
        except OSError:  # the file system has no anonymous files
            return False
        name = f"{TEMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
        dir_fd = os.open(self._staging, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.link(fd, None, dir_fd, name)
            os.unlink(name, dir_fd=dir_fd)
            return True
        except OSError:  # no /proc to name it by
            return False
        finally:
            os.close(fd)
            os.close(dir_fd)

    @staticmethod
    def link(fd: int, tmp: str | None, dir_fd: int, name: str) -> None:
        """Give the file ``name`` in the directory ``dir_fd``; FileExistsError if taken."""
        if tmp is not None:
            os.link(tmp, name, dst_dir_fd=dir_fd)
        else:  # linkat(AT_SYMLINK_FOLLOW) of the magic link names the anonymous inode
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=dir_fd, follow_symlinks=True)

    @staticmethod
    def discard(fd: int, tmp: str | None) -> None:
        os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass


def _read_ahead(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:  # deleted meanwhile
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, chunks: list[memoryview]) -> None:
    pending = [c for c in chunks if c.nbytes]
    i = 0
    while i < len(pending):
        written = os.writev(fd, pending[i : i + _IOV_MAX])
        # writev may write less than asked: skip whole chunks, then trim a partial one.
        while written:
            head = pending[i]
            if written >= head.nbytes:
                written -= head.nbytes
                i += 1
            else:
                pending[i] = head[written:]
                written = 0


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, offset + got)
        if not more:
            raise ObjectStoreError("object shrank while being read")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _writer_alive(temp_name: str) -> bool:
    """Whether the process that created a temp file (pid in its name) still runs."""
    try:
        pid = int(temp_name[len(TEMP_PREFIX) :].split("-", 1)[0])
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
