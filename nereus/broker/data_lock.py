"""One process per data directory: an OS file lock held for the life of the process.

Two processes writing one metadata engine or one local object store would corrupt
them, so a server takes ``LOCK_FILE`` in its data directory with ``flock`` before it
opens anything there. The kernel drops the lock when the process ends, however it
ends, so a crash never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "nereus.lock"


class DataDirLocked(RuntimeError):
    """Another process holds the data directory."""

    def __init__(self, data_dir: Path, holder: str) -> None:
        who = f"process {holder}" if holder else "another process"
        super().__init__(f"data directory {data_dir} is locked by {who} (a server already runs on it)")
        self.data_dir, self.holder = data_dir, holder


_held: dict[Path, int] = {}  # data dir -> the locked file's descriptor, kept open for the process's life


def lock_data_dir(data_dir: Path) -> None:
    """Create ``data_dir`` if needed and lock it for this process; raises ``DataDirLocked``."""
    data_dir = Path(data_dir).resolve()
    if data_dir in _held:
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        os.close(fd)
        raise DataDirLocked(data_dir, holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[data_dir] = fd


def hold_lock_file(path: Path, *, on_wait=None) -> None:
    """Lock ``path`` for this process's life, waiting while another process holds it.

    ``on_wait(holder)`` is called once if the lock is taken (holder: that process's pid
    as it wrote it). The compaction worker takes one beside its log so that a broker
    restarted after a crash never has two workers on the same data.
    """
    path = Path(path).resolve()
    if path in _held:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if on_wait is not None:
            on_wait(os.pread(fd, 32, 0).decode(errors="replace").strip())
        fcntl.flock(fd, fcntl.LOCK_EX)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[path] = fd


__all__ = ["LOCK_FILE", "DataDirLocked", "hold_lock_file", "lock_data_dir"]
