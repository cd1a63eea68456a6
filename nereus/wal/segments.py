"""Segment files of a replica: preallocated, written with ``O_DIRECT`` (else ``pwritev``), made
durable by ``fdatasync``.

Preallocation fixes a file's size and blocks up front, so an append inside it changes no
file size and needs only ``fdatasync``. A large write goes direct (``nereus.direct_io``: no
copy into the page cache); it starts at a block boundary, so it writes again the written part
of the block it starts in (``SegmentFile.tail``, kept in memory) and pads its last block with
the zeros the preallocated file holds there anyway. Every function here blocks on the file
system: the store runs them in its executors, never on the event loop.
"""

from __future__ import annotations

import errno
import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..direct_io import ALIGN, WORTH_IT_BYTES, DirectWriter
from . import records
from .errors import WalFull

SUFFIX = ".wal"
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024
_FULL = (errno.ENOSPC, errno.EDQUOT)


@dataclass(slots=True, eq=False)
class SegmentFile:
    seq: int
    path: Path
    fd: int
    capacity: int  # bytes preallocated
    end: int  # where the next record goes
    readers: int = 0  # reads in flight: the descriptor stays open for them after a delete
    deleted: bool = False
    tail: bytes = b""  # the bytes written in the block ``end`` falls in, before ``end`` (direct writes)

    def room(self) -> int:
        return self.capacity - self.end


def segment_path(directory: Path, seq: int) -> Path:
    return directory / f"{seq:016d}{SUFFIX}"


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    found = []
    for path in directory.iterdir():
        if path.suffix == SUFFIX and path.stem.isdigit():
            found.append((int(path.stem), path))
    return sorted(found)


def sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create(directory: Path, seq: int, size: int) -> SegmentFile:
    """A new segment of ``size`` bytes, allocated and durable (its directory entry too)."""
    path = segment_path(directory, seq)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)
    except OSError as exc:
        os.close(fd)
        path.unlink(missing_ok=True)
        if exc.errno in _FULL:
            raise WalFull(f"no space left in WAL directory {directory} for a segment of {size} bytes: "
                          f"{exc.strerror}") from exc
        raise
    sync_directory(directory)
    return SegmentFile(seq, path, fd, size, 0)


def open_existing(seq: int, path: Path) -> tuple[SegmentFile, records.Scan]:
    """An existing segment and what it holds (read through a read-only map: no heap copy)."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            scan = records.Scan()
        else:
            with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapped:
                scan = records.scan(mapped)
        tail = read(fd, scan.end - scan.end % ALIGN, scan.end % ALIGN) if scan.end % ALIGN else b""
    except BaseException:
        os.close(fd)
        raise
    return SegmentFile(seq, path, fd, size, scan.end, tail=tail), scan


def write_all(fd: int, buffers: list, position: int) -> None:
    """``pwritev`` every buffer at ``position``, however the kernel splits the write."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    first = 0
    while first < len(views):
        written = os.pwritev(fd, views[first:first + _IOV_MAX], position)
        position += written
        while first < len(views) and written >= len(views[first]):
            written -= len(views[first])
            first += 1
        if written:
            views[first] = views[first][written:]


def write_run(segment: SegmentFile, position: int, buffers: list, direct: DirectWriter | None = None) -> None:
    """Write ``buffers`` at ``position``, the end of what ``segment`` holds: directly when ``direct``
    is given, the write is large enough to be worth it and the file system takes it."""
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    end = position + sum(v.nbytes for v in views)
    start = position - position % ALIGN
    if len(segment.tail) != position - start:  # not expected: the store writes a segment from its end
        segment.tail = read(segment.fd, start, position - start)
    pieces = [memoryview(segment.tail), *views] if segment.tail else views
    worth_it = direct is not None and end - position >= WORTH_IT_BYTES
    if not (worth_it and direct.write(segment.fd, pieces, end - start, start)):
        write_all(segment.fd, views, position)
    segment.tail = _last_bytes(pieces, end % ALIGN)


def _last_bytes(views: list[memoryview], n: int) -> bytes:
    """The last ``n`` bytes of ``views`` joined."""
    out: list[memoryview] = []
    for view in reversed(views):
        if n <= 0:
            break
        out.append(view[max(0, view.nbytes - n):])
        n -= out[-1].nbytes
    return b"".join(reversed(out))


def write_and_sync(runs: list[tuple[SegmentFile, int, list]], direct: DirectWriter | None = None) -> list[float]:
    """Write each run (segment, position, buffers), then ``fdatasync`` each segment written once.

    Returns the seconds each ``fdatasync`` took.
    """
    for segment, position, buffers in runs:
        write_run(segment, position, buffers, direct)
    timings = []
    for fd in dict.fromkeys(segment.fd for segment, _, _ in runs):
        started = time.perf_counter()
        os.fdatasync(fd)
        timings.append(time.perf_counter() - started)
    return timings


def read(fd: int, position: int, length: int) -> bytes:
    data = os.pread(fd, length, position)
    if len(data) < length:  # a regular file answers short only at its end: no loop needed
        raise OSError(errno.EIO, f"short read: {len(data)} of {length} bytes at {position}")
    return data


def delete(segment: SegmentFile) -> None:
    segment.path.unlink(missing_ok=True)
