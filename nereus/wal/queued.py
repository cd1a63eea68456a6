"""A record on its way to disk: queued for the store's writer, then written with its batch."""

from __future__ import annotations

import asyncio

import crc32c

from ..direct_io import DirectWriter
from . import records, segments
from .errors import WalCorrupt
from .segments import SegmentFile


class QueuedRecord:
    """One record queued for the writer."""

    __slots__ = ("type", "block", "key", "names", "chunks", "length", "crc", "future", "segment", "position")

    def __init__(self, rtype: int, block: str, key: str, chunks: list[memoryview], length: int) -> None:
        self.type = rtype
        self.block = block
        self.key = key
        self.names = (block.encode(), key.encode())
        self.chunks = chunks
        self.length = length
        self.crc = 0
        # Callers wait through a shield: a caller that gives up never cancels the record (it
        # is written all the same), and whoever waits for it next still learns how it went.
        self.future: asyncio.Future = asyncio.get_running_loop().create_future()
        self.future.add_done_callback(lambda f: f.exception())
        self.segment: SegmentFile | None = None
        self.position = 0

    @property
    def size(self) -> int:
        return records.record_size(*self.names, self.length)

    @property
    def data_position(self) -> int:
        return self.position + self.size - self.length

    def buffers(self) -> list:
        """Header and data, checksummed (in the writer's thread)."""
        self.crc = records.data_crc(self.chunks)
        return [records.encode_head(self.type, *self.names, self.length, self.crc), *self.chunks]


def write_batch(runs: list[tuple[SegmentFile, int, list[QueuedRecord]]],
                direct: DirectWriter | None = None) -> list[float]:
    """Write each run of records at its position, then fdatasync (in the writer's thread); ``direct``:
    the store's ``DirectWriter``."""
    return segments.write_and_sync([(segment, position, [b for op in ops for b in op.buffers()])
                                    for segment, position, ops in runs], direct)


def read_checked(fd: int, position: int, length: int, crc: int | None) -> bytes:
    """Bytes of an entry, compared with its checksum unless ``crc`` is None (in a reader's thread)."""
    data = segments.read(fd, position, length)
    if crc is not None and crc32c.crc32c(data) != crc:
        raise WalCorrupt(f"checksum mismatch reading {length} bytes at {position}")
    return data
