"""Received bytes kept as the chunks they came in, read from without copying (sans-io).

Both protocol decoders frame a stream this way: a frame that lies inside one received
chunk is handed out as a memoryview of it (a ``bytes`` never changes, so the view stays
valid); only a frame split across chunks is joined, once.
"""

from __future__ import annotations

import struct
from collections import deque


class ChunkQueue:
    """A FIFO of received bytes, consumed from the front."""

    __slots__ = ("_chunks", "_head", "buffered")

    def __init__(self) -> None:
        self._chunks: deque[bytes] = deque()
        self._head = 0  # read offset into self._chunks[0]
        self.buffered = 0  # bytes received and not consumed

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Keep received bytes. Mutable buffers are copied (their owner may reuse them)."""
        if not data:
            return
        if type(data) is not bytes:
            data = bytes(data)
        self._chunks.append(data)
        self.buffered += len(data)

    def peek(self, fmt: struct.Struct) -> tuple:
        """``fmt`` unpacked from the front, not consumed (``buffered`` must cover it)."""
        chunk, head = self._chunks[0], self._head
        if len(chunk) - head >= fmt.size:
            return fmt.unpack_from(chunk, head)
        return fmt.unpack(self._gather(fmt.size))

    def take(self, n: int) -> memoryview:
        """The next ``n`` bytes, consumed: a view of one chunk when they lie in one."""
        if not n:
            return memoryview(b"")
        chunk, head = self._chunks[0], self._head
        if len(chunk) - head >= n:
            view = memoryview(chunk)[head:head + n]
        else:
            view = memoryview(self._gather(n))  # the one copy: the bytes span chunks
        self.skip(n)
        return view

    def skip(self, n: int) -> None:
        """Consume ``n`` bytes."""
        self.buffered -= n
        while n:
            left = len(self._chunks[0]) - self._head
            if n < left:
                self._head += n
                return
            n -= left
            self._chunks.popleft()
            self._head = 0

    def _gather(self, n: int) -> bytes:
        pieces, need, head = [], n, self._head
        for chunk in self._chunks:
            piece = memoryview(chunk)[head:head + need]
            pieces.append(piece)
            need -= piece.nbytes
            head = 0
            if not need:
                break
        return b"".join(pieces)
