"""Writing with ``O_DIRECT``, from page-aligned buffers that are reused.

A buffered write copies every byte into the page cache inside the kernel. In a broker under
produce load that copy was measured at ~2 ms of CPU per MiB, five times what the same write
costs an idle process (the cause was not found), and half of all the CPU a produced Kafka
message cost. A direct write copies the bytes once, in user space, into an aligned buffer;
the device takes them from there. The file object store's large puts and the WAL replicas'
large group commits are written so (``WORTH_IT_BYTES``); a small write costs little to copy,
and written directly it would be mostly padding.

``O_DIRECT`` wants the buffer, the file offset and the length aligned to the device's
block: the bytes go in pieces of ``PIECE`` (a whole number of blocks); the last piece is
padded with zeros to the block (a new file is then cut back to its size; a preallocated
one is written over the padding by its next write). A file system that refuses
``O_DIRECT`` (some FUSE and network file systems, tmpfs before Linux 6.6) answers
``EINVAL``: the writer then says so, and its owner writes buffered from then on.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import threading

ALIGN = 4096  # covers devices of 512-byte and 4 KiB logical blocks
PIECE = 4 << 20
#: Writes of fewer bytes go buffered.
WORTH_IT_BYTES = 128 << 10


class DirectWriter:
    """Writes files with ``O_DIRECT``; thread-safe. ``enabled`` turns False for good once the
    file system refuses it. At most ``keep`` buffers of ``PIECE`` bytes stay mapped between writes."""

    def __init__(self, keep: int = 2) -> None:
        self.enabled = hasattr(os, "O_DIRECT")
        self._keep = keep
        self._lock = threading.Lock()
        self._free: list[mmap.mmap] = []

    def write(self, fd: int, chunks: list[memoryview], size: int, offset: int = 0) -> bool:
        """Write ``chunks`` (``size`` bytes in all) at ``offset`` (a multiple of ``ALIGN``) of ``fd``,
        the last block padded with zeros: the caller cuts the file back, or writes over the padding.

        False when the file system refuses ``O_DIRECT`` (nothing was written: the caller writes
        buffered); other errors raise ``OSError`` as a buffered write would."""
        if offset % ALIGN:
            raise ValueError(f"offset {offset} is not a multiple of {ALIGN}")
        if not self.enabled:
            return False
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        try:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_DIRECT)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self.enabled = False
            return False
        buf = self._take()
        view = memoryview(buf)
        try:
            return self._write_pieces(fd, view, chunks, size, offset, flags)
        finally:
            view.release()
            self._give(buf)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags)

    def _write_pieces(self, fd: int, view: memoryview, chunks: list[memoryview], size: int, start: int,
                      flags: int) -> bool:
        source = iter(chunks)
        chunk, used = memoryview(b""), 0
        offset = start
        direct = True
        while offset < start + size:
            want, fill = min(PIECE, start + size - offset), 0
            while fill < want:
                if used == chunk.nbytes:
                    chunk, used = next(source), 0
                    continue
                n = min(chunk.nbytes - used, want - fill)
                view[fill:fill + n] = chunk[used:used + n]
                fill += n
                used += n
            end = (fill + ALIGN - 1) & ~(ALIGN - 1) if direct else fill
            if end > fill:
                view[fill:end] = bytes(end - fill)
            done = 0
            while done < end:
                try:
                    n = os.pwrite(fd, view[done:end], offset + done)
                except OSError as exc:
                    if exc.errno == errno.EINVAL and direct and offset == start and done == 0:
                        self.enabled = False  # the device wants more alignment than ALIGN
                        return False
                    raise
                if n <= 0:
                    raise OSError(errno.EIO, "a write of the object wrote nothing")
                done += n
                if direct and done % ALIGN:
                    # A short direct write (the disk filling up, say): the rest goes buffered,
                    # which takes any offset; the padding is not needed then.
                    fcntl.fcntl(fd, fcntl.F_SETFL, flags)
                    direct, end = False, fill
            offset += fill
        return True

    def _take(self) -> mmap.mmap:
        with self._lock:
            if self._free:
                return self._free.pop()
        return mmap.mmap(-1, PIECE)

    def _give(self, buf: mmap.mmap) -> None:
        with self._lock:
            if len(self._free) < self._keep:
                self._free.append(buf)
                return
        buf.close()

    def close(self) -> None:
        with self._lock:
            free, self._free = self._free, []
        for buf in free:
            buf.close()


__all__ = ["ALIGN", "DirectWriter", "PIECE", "WORTH_IT_BYTES"]
