"""Keep the part of a shard's LMDB map that the process has mapped under a byte budget.

LMDB reads records straight from its memory map: every page a read touches stays mapped in
the process, and counts in its resident set (VmRSS), until the kernel takes it back. An
engine of 10M records maps ~4.5 GB that way, none of it heap. Dropping those pages from the
process (``MADV_DONTNEED`` on the read-only shared map) leaves them in the page cache, so the
next read of one costs a minor fault, not a disk read, and the data is untouched: the map is
never written through.

Only the shard's own thread may call :meth:`MapResidency.maybe_trim`: it alone grows the
map, so the address range looked up cannot be remapped before it is dropped. Readers in other
threads may touch the range meanwhile: a page dropped under one is read again from the cache.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time
from typing import Callable

log = logging.getLogger(__name__)

_SMAPS = "/proc/self/smaps"
_MADV_DONTNEED = 4  # Linux


def _madvise() -> Callable[[int, int, int], int] | None:
    if not os.path.exists(_SMAPS):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fn = libc.madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def mapped_bytes(path: str) -> tuple[int, int, int] | None:
    """``(start, end, resident bytes)`` of the process's mapping of the file ``path``, or None."""
    with open(_SMAPS, "rb") as f:
        data = f.read()
    target = b" " + os.fsencode(path) + b"\n"
    at = data.find(target)
    if at < 0:
        return None
    head = data.rfind(b"\n", 0, at) + 1
    start, _, end = data[head:data.index(b" ", head)].partition(b"-")
    rss_at = data.index(b"\nRss:", at) + 5
    rss_kb = int(data[rss_at:data.index(b"kB", rss_at)])
    return int(start, 16), int(end, 16), rss_kb * 1024


class MapResidency:
    """Drops an LMDB environment's mapped pages from the process when they pass ``budget`` bytes.

    Checked at most every ``interval`` seconds (reading ``/proc/self/smaps`` costs a few
    milliseconds); a no-op where that file or ``madvise`` is missing, or ``budget`` is 0.
    """

    def __init__(self, env_dir: str, budget: int, *, interval: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.path = os.path.join(os.path.realpath(env_dir), "data.mdb")
        self.budget = budget
        self.interval = interval
        self.trims = 0
        self._clock = clock
        self._next = clock()
        self._madvise = _madvise() if budget > 0 else None

    @property
    def active(self) -> bool:
        """Whether checks can drop anything here (a budget, and the means to drop pages)."""
        return self._madvise is not None

    def due_in(self) -> float:
        """Seconds until the next check may run (0: now)."""
        return max(0.0, self._next - self._clock())

    def maybe_trim(self) -> bool:
        """Check (and drop the pages) if the interval has passed; returns whether it checked."""
        if self._madvise is None or self._clock() < self._next:
            return False
        self._next = self._clock() + self.interval
        try:
            found = mapped_bytes(self.path)
        except (OSError, ValueError):
            return True
        if found is None or found[2] <= self.budget:
            return True
        start, end, resident = found
        if self._madvise(start, end - start, _MADV_DONTNEED) != 0:
            log.warning("cannot drop the mapped pages of %s: %s", self.path, os.strerror(ctypes.get_errno()))
            self._madvise = None
            return True
        self.trims += 1
        log.debug("dropped %d MiB of mapped pages of %s", resident >> 20, self.path)
        return True


__all__ = ["MapResidency", "mapped_bytes"]
